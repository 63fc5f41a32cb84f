"""The ShadowPod webhook's answers, over a fake API (list, a silent watch, get): who is judged, and how.

The verdict itself is property-tested in test_pod_security; here: the consumer comes from the namespace,
its policy from the SharingPolicies, an unchanged update passes, a cold cache or a broken policy refuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.resources import SHARING_POLICIES
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES
from liqo.offloading.pod_webhook import PodReview
from liqo.offloading.shadowpod_webhook import NOT_SYNCED, ShadowPodWebhook, unchanged
from liqo.sharing.policy import PodSecurity, select_policy
from tests.unit.fakeapi import FakeApi

ROME = "rome-id"


def twin(name: str, consumer: str = ROME) -> Obj:
    labels = {names.REMOTE_CLUSTER_ID: consumer, names.ORIGIN_NAMESPACE: "web"}
    return {"metadata": {"name": name, "labels": labels}}


def policy(name: str, *, peers: list[str], level: str) -> Obj:
    spec = {"action": "Share", "peers": peers, "podSecurity": {"level": level}}
    return {"metadata": {"name": name}, "spec": spec}


def gets(api: FakeApi) -> list[str]:
    """The namespaces read from the API server (only ever namespaces: the rest comes from the caches)."""
    assert all(call.plural == NAMESPACES.plural for call in api.called("get"))
    return [str(call.name) for call in api.called("get")]


def select(policies: Sequence[Mapping[str, Any]], consumer: str) -> PodSecurity:
    return select_policy(policies, peer_id=consumer).pod_security


def review(
    namespace: str,
    pod: Obj,
    *,
    operation: str = "CREATE",
    old_pod: Obj | None = None,
    labels: Obj | None = None,
    old_labels: Obj | None = None,
    annotations: Obj | None = None,
    old_annotations: Obj | None = None,
) -> PodReview:
    def shadow(spec: Obj, labels: Obj | None, annotations: Obj | None) -> Obj:
        meta = {"name": "p", "namespace": namespace, "labels": labels or {}}
        if annotations is not None:
            meta["annotations"] = annotations
        return {"metadata": meta, "spec": {"pod": spec}}

    return PodReview(
        uid="u1",
        namespace=namespace,
        operation=operation,
        kind="ShadowPod",
        group="virtualkubelet.liqo.io",
        sub_resource="",
        obj=shadow(pod, labels, annotations),
        old_obj=shadow(old_pod, old_labels, old_annotations) if old_pod is not None else None,
    )


PLAIN = {"containers": [{"name": "c", "image": "nginx"}]}
HOST_PATH = {**PLAIN, "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}
ROOT = {"containers": [{"name": "c", "image": "nginx", "securityContext": {"runAsUser": 0}}]}


@pytest.fixture
async def webhook() -> AsyncIterator[tuple[ShadowPodWebhook, FakeApi]]:
    api = FakeApi(
        (NAMESPACES, twin("web-rome")),
        (NAMESPACES, twin("web-naples", consumer="naples-id")),
        (SHARING_POLICIES, policy("strict-naples", peers=["naples-id"], level="restricted")),
        listing=False,
    )
    hook = ShadowPodWebhook(client=api, select=select)
    tasks = [asyncio.create_task(i.run()) for i in (hook.namespaces, hook.policies)]
    yield hook, api
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    gets(api)  # nothing else was read


async def synced(hook: ShadowPodWebhook, api: FakeApi) -> None:
    api.listing.set()
    assert await hook.namespaces.wait_synced(5)
    assert await hook.policies.wait_synced(5)


def answer(response: Obj) -> tuple[bool, int | None, str]:
    status = response["response"].get("status") or {}
    return response["response"]["allowed"], status.get("code"), status.get("message", "")


async def test_until_its_caches_are_synced_it_refuses_with_503(webhook: tuple[ShadowPodWebhook, FakeApi]) -> None:
    hook, _ = webhook
    assert answer(await hook.review(review("web-rome", PLAIN))) == (False, 503, NOT_SYNCED)


async def test_the_consumers_policy_is_the_namespaces(webhook: tuple[ShadowPodWebhook, FakeApi]) -> None:
    hook, api = webhook
    await synced(hook, api)
    assert answer(await hook.review(review("web-rome", PLAIN))) == (True, None, "")
    assert answer(await hook.review(review("web-rome", ROOT)))[0]  # baseline for rome
    allowed, code, message = answer(await hook.review(review("web-naples", ROOT)))  # restricted for naples
    assert (allowed, code) == (False, 403)
    assert "spec.pod.containers[0].securityContext.runAsUser" in message
    allowed, code, message = answer(await hook.review(review("web-rome", HOST_PATH)))
    assert (allowed, code) == (False, 403)
    assert "spec.pod.volumes[0].hostPath: hostPath volumes are refused (baseline)" in message


async def test_a_namespace_missing_from_the_cache_is_looked_up(webhook: tuple[ShadowPodWebhook, FakeApi]) -> None:
    hook, api = webhook
    await synced(hook, api)
    api.put(NAMESPACES, twin("fresh-rome"), notify=False)  # not watched yet
    assert answer(await hook.review(review("fresh-rome", PLAIN)))[0]
    allowed, code, message = answer(await hook.review(review("kube-system", PLAIN)))
    assert (allowed, code) == (False, 403)
    assert "metadata.namespace" in message
    assert gets(api) == ["fresh-rome", "kube-system"]


async def test_an_update_that_leaves_the_pod_alone_passes_whatever_the_policy_says_now(
    webhook: tuple[ShadowPodWebhook, FakeApi],
) -> None:
    hook, api = webhook
    await synced(hook, api)
    # A ShadowPod admitted before naples' policy tightened: its finalizer can still be written and removed.
    assert answer(await hook.review(review("web-naples", ROOT, operation="UPDATE", old_pod=ROOT)))[0]
    assert not answer(await hook.review(review("web-naples", ROOT, operation="UPDATE", old_pod=PLAIN)))[0]


async def test_keys_off_the_list_are_never_refused_created_or_added(webhook: tuple[ShadowPodWebhook, FakeApi]) -> None:
    """A key other components act on is left off the pod the controller makes, so no ShadowPod is refused for one:
    created with it, or given it later (the registration does not even send a label update: its CEL); a label
    update passes whatever the policy says now."""
    hook, api = webhook
    await synced(hook, api)
    istio = {"app": "web", "sidecar.istio.io/inject": "true", "helm.sh/chart": "web-1.0.0"}
    created = review("web-rome", PLAIN, labels=istio, annotations={"k8s.v1.cni.cncf.io/networks": "macvlan-host"})
    assert answer(await hook.review(created)) == (True, None, "")
    added = review("web-rome", PLAIN, operation="UPDATE", old_pod=PLAIN, labels=istio)
    assert unchanged(added)
    assert answer(await hook.review(added)) == (True, None, "")
    tier = review("web-rome", PLAIN, operation="UPDATE", old_pod=PLAIN, labels={"tier": "web"}, old_labels={"app": "x"})
    assert unchanged(tier)
    assert answer(await hook.review(tier))[0]
    # ROOT, admitted before naples' policy tightened: its labels change all the same.
    tightened = review("web-naples", ROOT, operation="UPDATE", old_pod=ROOT, labels=istio, old_labels={"app": "x"})
    assert unchanged(tightened)
    assert answer(await hook.review(tightened)) == (True, None, "")


GRACE = {names.GRACE_PERIOD: "5"}
RESTARTED = {"kubectl.kubernetes.io/restartedAt": "2030-01-01T00:00:00Z"}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ({}, GRACE),  # the virtual kubelet's write before it deletes the ShadowPod
        (GRACE, {names.GRACE_PERIOD: "1"}),
        (GRACE, {}),
        (RESTARTED, RESTARTED | GRACE),
        (None, GRACE),
    ],
)
async def test_an_update_of_liqos_bookkeeping_alone_passes_whatever_the_policy_says_now(
    webhook: tuple[ShadowPodWebhook, FakeApi], before: Obj | None, after: Obj
) -> None:
    """ROOT was admitted before naples' policy tightened: its grace period must reach the provider all the same."""
    hook, api = webhook
    await synced(hook, api)
    update = review("web-naples", ROOT, operation="UPDATE", old_pod=ROOT, annotations=after, old_annotations=before)
    assert unchanged(update)
    assert answer(await hook.review(update)) == (True, None, "")


@pytest.mark.parametrize("after", [RESTARTED, RESTARTED | GRACE, {}])
async def test_any_other_annotation_change_is_judged_with_the_pod(
    webhook: tuple[ShadowPodWebhook, FakeApi], after: Obj
) -> None:
    hook, api = webhook
    await synced(hook, api)
    before = {} if after else RESTARTED
    update = review("web-naples", ROOT, operation="UPDATE", old_pod=ROOT, annotations=after, old_annotations=before)
    assert not unchanged(update)
    allowed, code, message = answer(await hook.review(update))
    assert (allowed, code) == (False, 403)
    assert "spec.pod.containers[0].securityContext.runAsUser" in message


_KEYS = st.sampled_from(["app", "kubectl.kubernetes.io/restartedAt", "example.com/x", names.GRACE_PERIOD])
_ANNOTATIONS = st.dictionaries(_KEYS, st.sampled_from(["", "1", "x"]), max_size=4)


@given(before=_ANNOTATIONS, after=_ANNOTATIONS, labels=_ANNOTATIONS, old_labels=_ANNOTATIONS)
def test_an_update_is_unchanged_exactly_when_nothing_but_bookkeeping_annotations_moved(
    before: dict[str, str], after: dict[str, str], labels: dict[str, str], old_labels: dict[str, str]
) -> None:
    """Labels never count: the verdict judges no label but its type."""
    update = review(
        "web-rome",
        PLAIN,
        operation="UPDATE",
        old_pod=PLAIN,
        annotations=after,
        old_annotations=before,
        labels=labels,
        old_labels=old_labels,
    )

    def judged(annotations: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in annotations.items() if k != names.GRACE_PERIOD}

    assert unchanged(update) == (judged(before) == judged(after))


async def test_other_requests_pass(webhook: tuple[ShadowPodWebhook, FakeApi]) -> None:
    hook, api = webhook
    await synced(hook, api)
    other = review("web-rome", HOST_PATH)
    for changed in ({"kind": "Pod", "group": ""}, {"sub_resource": "status"}, {"operation": "DELETE"}):
        assert answer(await hook.review(PodReview(**{**other.__dict__, **changed})))[0], changed


async def test_a_malformed_policy_refuses_rather_than_guess(webhook: tuple[ShadowPodWebhook, FakeApi]) -> None:
    hook, api = webhook
    broken = {"action": "Share", "peers": [ROME], "limits": {"cpu": "lots"}}
    api.put(SHARING_POLICIES, {"metadata": {"name": "broken"}, "spec": broken})
    await synced(hook, api)
    allowed, code, message = answer(await hook.review(review("web-rome", PLAIN)))
    assert (allowed, code) == (False, 500)
    assert "cannot judge pods in namespace web-rome" in message
