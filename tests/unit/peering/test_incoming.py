"""The provider's decision about a consumer's incoming side: engaged, left, refused, or never came."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.kube.objects import Obj
from liqo.peering.incoming import ABANDONED_AFTER, ENGAGED, LEFT, REQUESTED, Verdict, verdict

NOW = datetime.datetime(2030, 1, 1, 12, 0, tzinfo=datetime.UTC)


def tenant(
    *,
    age: datetime.timedelta = datetime.timedelta(0),
    engaged: bool = False,
    left: bool = False,
    deleting: bool = False,
) -> Obj:
    meta: Obj = {"name": "liqo-tenant-x", "creationTimestamp": (NOW - age).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if engaged or left:
        meta["annotations"] = {REQUESTED: ENGAGED if engaged else LEFT}
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T11:00:00Z"
    return {"metadata": meta}


def fc(*, incoming: str = "Auto", outgoing: str = "No", ours: bool = False, deleting: bool = False) -> Obj:
    """A record; ``ours``: our own side's finalizer on it (we consumed from the peer, its teardown runs)."""
    meta: Obj = {"name": "x"}
    if ours:
        meta["finalizers"] = [names.FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2030-01-01T11:00:00Z"
    return {"metadata": meta, "spec": {"incomingPeeringEnabled": incoming, "outgoingPeeringEnabled": outgoing}}


REQUEST: Obj = {"metadata": {"name": "x"}}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"tenant": None, "request": REQUEST, "foreign_cluster": fc()}, Verdict.NOTHING),
        ({"tenant": tenant(deleting=True), "request": None, "foreign_cluster": fc()}, Verdict.NOTHING),
        ({"tenant": tenant(), "request": REQUEST, "foreign_cluster": fc()}, Verdict.MARK_ENGAGED),
        ({"tenant": tenant(engaged=True), "request": REQUEST, "foreign_cluster": fc()}, Verdict.NOTHING),
        ({"tenant": tenant(engaged=True), "request": None, "foreign_cluster": fc()}, Verdict.RELEASE),
        ({"tenant": tenant(), "request": None, "foreign_cluster": fc()}, Verdict.WAIT),
        ({"tenant": tenant(age=ABANDONED_AFTER), "request": None, "foreign_cluster": fc()}, Verdict.RELEASE),
        ({"tenant": tenant(age=ABANDONED_AFTER), "request": None, "foreign_cluster": None}, Verdict.RELEASE),
        (
            {"tenant": tenant(age=ABANDONED_AFTER), "request": None, "foreign_cluster": fc(outgoing="Yes")},
            Verdict.NOTHING,
        ),
        (
            {"tenant": tenant(engaged=True), "request": REQUEST, "foreign_cluster": fc(incoming="No")},
            Verdict.RELEASE_REFUSED,
        ),
        ({"tenant": tenant(), "request": None, "foreign_cluster": fc(incoming="No")}, Verdict.RELEASE_REFUSED),
        (
            {"tenant": tenant(), "request": None, "foreign_cluster": fc(incoming="No", outgoing="Yes")},
            Verdict.NOTHING,
        ),
        (
            {"tenant": tenant(), "request": REQUEST, "foreign_cluster": fc(incoming="No", outgoing="Yes")},
            Verdict.RELEASE_REFUSED,
        ),
        ({"tenant": tenant(left=True), "request": None, "foreign_cluster": fc(outgoing="Yes")}, Verdict.NOTHING),
        ({"tenant": tenant(left=True), "request": None, "foreign_cluster": fc()}, Verdict.RELEASE),
        ({"tenant": tenant(left=True), "request": None, "foreign_cluster": None}, Verdict.RELEASE),
        ({"tenant": tenant(left=True), "request": REQUEST, "foreign_cluster": fc()}, Verdict.MARK_ENGAGED),
        ({"tenant": tenant(left=True), "request": None, "foreign_cluster": fc(incoming="No")}, Verdict.RELEASE_REFUSED),
        ({"tenant": tenant(left=True), "request": None, "foreign_cluster": fc(ours=True)}, Verdict.RELEASE_RECORD),
        ({"tenant": tenant(engaged=True), "request": None, "foreign_cluster": fc(ours=True)}, Verdict.RELEASE_RECORD),
        (
            {"tenant": tenant(engaged=True), "request": None, "foreign_cluster": fc(outgoing="Yes", ours=True)},
            Verdict.RELEASE,
        ),
        (
            {"tenant": tenant(left=True), "request": None, "foreign_cluster": fc(ours=True, deleting=True)},
            Verdict.NOTHING,
        ),
        (
            {"tenant": tenant(age=ABANDONED_AFTER), "request": None, "foreign_cluster": fc(ours=True)},
            Verdict.RELEASE_RECORD,
        ),
    ],
    ids=[
        "no tenant",
        "tenant terminating",
        "first request",
        "engaged",
        "withdrawn",
        "fresh handshake, no request yet",
        "abandoned",
        "abandoned, no record",
        "our own outgoing tenant",
        "revoked while engaged",
        "revoked before its request",
        "refused, but we consume from it: nothing of theirs",
        "refused, we consume from it, their request",
        "left while we consume from it",
        "left, and we no longer consume from it",
        "left, and our record of it gone",
        "left, and back",
        "left, then refused",
        "left, and our side's teardown to run: the record first",
        "withdrawn, our side's teardown to run: the record first",
        "withdrawn while we consume from it: its part only",
        "left, our side's teardown running",
        "abandoned, our side's teardown to run: the record first",
    ],
)
def test_the_verdict(arguments: dict[str, Any], expected: Verdict) -> None:
    assert verdict(now=NOW, **arguments) is expected


@given(age=st.integers(min_value=0, max_value=10_000), engaged=st.booleans(), has_request=st.booleans())
def test_a_refused_consumer_is_never_kept_and_an_engaged_one_never_waits(
    age: int, engaged: bool, has_request: bool
) -> None:
    ns = tenant(age=datetime.timedelta(seconds=age), engaged=engaged)
    request = REQUEST if has_request else None
    assert verdict(tenant=ns, request=request, foreign_cluster=fc(incoming="No"), now=NOW) is Verdict.RELEASE_REFUSED
    outcome = verdict(tenant=ns, request=request, foreign_cluster=fc(), now=NOW)
    if engaged or has_request:
        assert outcome in (Verdict.NOTHING, Verdict.MARK_ENGAGED, Verdict.RELEASE)
    else:
        assert outcome is (Verdict.RELEASE if age >= ABANDONED_AFTER.total_seconds() else Verdict.WAIT)


@given(
    mark=st.sampled_from(["engaged", "left", None]),
    has_request=st.booleans(),
    ours=st.booleans(),
    incoming=st.sampled_from(["Auto", "No"]),
    age=st.integers(min_value=0, max_value=10_000),
)
def test_our_record_is_never_deleted_while_we_consume_from_the_peer(
    mark: str | None, has_request: bool, ours: bool, incoming: str, age: int
) -> None:
    ns = tenant(age=datetime.timedelta(seconds=age), engaged=mark == "engaged", left=mark == "left")
    record = fc(incoming=incoming, outgoing="Yes", ours=ours)
    outcome = verdict(tenant=ns, request=REQUEST if has_request else None, foreign_cluster=record, now=NOW)
    # RELEASE and RELEASE_REFUSED release the consumer's part only while we consume (IncomingPeering._release).
    assert outcome is not Verdict.RELEASE_RECORD
