"""Following: groups started, restarted and stopped as the wanted members change, and a replay once synced."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.cache import InformerGroup
from liqo.kube.following import Following
from liqo.kube.informer import Informer
from liqo.kube.resources import PODS
from tests.shared import eventually
from tests.unit.fakeapi import FakeApi


class Group(InformerGroup):
    def __init__(self, api: FakeApi, member: str, spec: str) -> None:
        self.spec = spec
        self.stopped = False
        super().__init__([Informer(client=api, resource=PODS, namespace=member)], name=f"group {member}")

    async def stop(self) -> None:
        self.stopped = True
        await super().stop()


async def test_new_changed_and_gone_members() -> None:
    api = FakeApi()
    stops: list[str] = []
    following: Following[str, str, Group] = Following(
        make=lambda member, spec: Group(api, member, spec), on_stop=lambda member, _group: stops.append(member)
    )
    assert following.follow({"a": "1", "b": "1"}) == ({"a", "b"}, set())
    first_a = following.get("a")
    assert first_a is not None
    assert first_a.started

    # Same specs: nothing moves. A changed spec is a restart; a missing member is stopped.
    assert following.follow({"a": "1", "b": "1"}) == (set(), set())
    assert following.follow({"a": "2"}) == ({"a"}, {"a", "b"})
    second_a = following.get("a")
    assert second_a is not None
    assert second_a is not first_a
    assert second_a.spec == "2"
    assert following.get("b") is None
    assert sorted(stops) == ["a", "b"]

    await following.close()
    assert first_a.stopped
    assert second_a.stopped
    assert following.members() == []


async def test_on_synced_is_called_once_every_informer_has_listed() -> None:
    api = FakeApi()
    api.listing.clear()
    synced: list[str] = []
    following: Following[str, str, Group] = Following(
        make=lambda member, spec: Group(api, member, spec), on_synced=lambda member, _group: synced.append(member)
    )
    following.follow({"a": "1"})
    group = following.get("a")
    assert group is not None
    assert not await group.informers[0].wait_synced(0.05)
    assert synced == []  # still listing
    api.listing.set()

    async def replayed() -> bool:
        return synced == ["a"]

    await eventually(replayed, timeout=5, message="on_synced called")
    await following.close()


@given(st.lists(st.dictionaries(st.sampled_from("abcd"), st.sampled_from("xy")), max_size=6))
def test_the_followed_members_are_always_the_wanted_ones(steps: list[dict[str, str]]) -> None:
    async def run() -> None:
        api = FakeApi()
        following: Following[str, str, Group] = Following(make=lambda member, spec: Group(api, member, spec))
        for wanted in steps:
            following.follow(wanted)
            assert sorted(following.members()) == sorted(wanted)
            for member, spec in wanted.items():
                group = following.get(member)
                assert group is not None
                assert group.spec == spec
        await following.close()

    asyncio.run(run())
