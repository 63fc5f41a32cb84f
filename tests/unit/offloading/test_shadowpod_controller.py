"""The provider's ShadowPod controller keeps every pod it makes within the budget, whatever its cache lags.

Its caches are seeded as a list would fill them and its API is a fake holding the pods that "really" exist,
so that a test can hold the cache behind the API server: a pod created but not shown yet, one whose creation
timed out. Real clusters: ``tests/integration/offloading/test_budget.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import cast

from liqo.api import names
from liqo.api.resources import RESOURCE_OFFERS, SHADOW_PODS
from liqo.api.storage import ClassOffer
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.errors import UnreachableError
from liqo.kube.events import EventRecorder
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import EVENTS, PODS, object_key
from liqo.offloading.shadowpods import KEYS_NOT_COPIED, ShadowPods
from liqo.sharing.policy import PodSecurity
from tests.unit.fakeapi import FakeApi

TWIN = "web-rome"
CONSUMER = "rome-id"
PROVIDER = "milan-id"


@dataclass(frozen=True)
class Policy:
    count_limits: bool = True
    pod_security: PodSecurity = field(default_factory=PodSecurity)


def pods(api: FakeApi) -> dict[str, Obj]:
    """The pods the API holds, by key."""
    return {f"{ns}/{name}": obj for (plural, ns, name), obj in api.objects.items() if plural == PODS.plural}


def creations(api: FakeApi) -> list[str]:
    """The pods created, in order (a create that conflicted made nothing; one whose answer was lost did)."""
    return [call.key for call in api.called("create", PODS) if call.landed]


def gets(api: FakeApi) -> list[str]:
    return [call.key for call in api.called("get", PODS)]


def statuses(api: FakeApi) -> dict[str, Obj]:
    """The last status written on each ShadowPod."""
    return {call.key: call.body["status"] for call in api.called("apply", SHADOW_PODS)}


def events(api: FakeApi) -> list[Obj]:
    return [call.body for call in api.called("create", EVENTS)]


def put(informer: Informer, obj: Obj) -> None:
    """What the informer's list or watch would put in its cache."""
    informer._cache[object_key(obj)] = obj


def drop(informer: Informer, key: str) -> None:
    informer._cache.pop(key, None)


def shadow(name: str, *, cpu: str, uid: str | None = None) -> Obj:
    container = {"name": "app", "image": "nginx", "resources": {"requests": {"cpu": cpu}}}
    return {
        "apiVersion": SHADOW_PODS.api_version,
        "kind": SHADOW_PODS.kind,
        "metadata": {
            "name": name,
            "namespace": TWIN,
            "uid": uid or f"uid-{name}",
            "labels": names.peer_labels(CONSUMER),
            "finalizers": [names.FINALIZER],
        },
        "spec": {"pod": {"automountServiceAccountToken": False, "containers": [container]}},
    }


def controller(api: FakeApi, *, cpu: str = "8", phase: str = "Accepted", policy: Policy | None = None) -> ShadowPods:
    client = cast(KubeClient, api)
    made = ShadowPods(
        client=client,
        informers=SharedInformers(client),
        events=EventRecorder(client=client, component="test"),
        local_id=PROVIDER,
        select=lambda _policies, _consumer: policy or Policy(),
    )
    labels = {names.REMOTE_CLUSTER_ID: CONSUMER, names.ORIGIN_NAMESPACE: "web"}
    put(made.namespaces, {"metadata": {"name": TWIN, "labels": labels}})
    set_offer(made, cpu=cpu, phase=phase)
    return made


def set_offer(made: ShadowPods, *, cpu: str = "8", phase: str) -> None:
    offer = {
        "apiVersion": RESOURCE_OFFERS.api_version,
        "kind": RESOURCE_OFFERS.kind,
        "metadata": {"name": PROVIDER, "namespace": names.tenant_namespace(CONSUMER), "resourceVersion": phase},
        "spec": {"resources": {"cpu": cpu, "pods": "10"}},
        "status": {"phase": phase},
    }
    put(made.offers, offer)


def cpu_of(api: FakeApi, key: str) -> str:
    return str(pods(api)[key]["spec"]["containers"][0]["resources"]["requests"]["cpu"])


async def test_a_spec_raised_after_admission_is_checked_when_the_pod_is_made_again() -> None:
    api = FakeApi()
    shadow_pods = controller(api)
    for name, cpu in (("big", "7"), ("small", "10m")):
        put(shadow_pods.shadows, shadow(name, cpu=cpu))
        await shadow_pods.reconcile(f"{TWIN}/{name}")
        put(shadow_pods.pods, pods(api)[f"{TWIN}/{name}"])
    assert creations(api) == [f"{TWIN}/big", f"{TWIN}/small"]

    # The peer raises small to 7 CPU; its pod runs on as it was admitted.
    put(shadow_pods.shadows, shadow("small", cpu="7"))
    await shadow_pods.reconcile(f"{TWIN}/small")
    assert creations(api) == [f"{TWIN}/big", f"{TWIN}/small"]
    assert cpu_of(api, f"{TWIN}/small") == "10m"

    # Its pod gone (a drain): the next one would be 7 CPU beside big's 7 of 8, so it waits.
    api.remove(PODS, "small", namespace=TWIN)
    drop(shadow_pods.pods, f"{TWIN}/small")
    await shadow_pods.reconcile(f"{TWIN}/small")
    assert creations(api) == [f"{TWIN}/big", f"{TWIN}/small"]
    status = statuses(api)[f"{TWIN}/small"]
    assert (status["phase"], status["reason"]) == ("Waiting", "OverBudget")
    assert status["message"].startswith("cpu requests: the pod requests 7,")
    assert shadow_pods.ledger.in_use(CONSUMER).requests["cpu"] == 7


async def test_a_pod_the_cache_has_not_shown_yet_is_neither_made_twice_nor_let_go() -> None:
    api = FakeApi()
    shadow_pods = controller(api)
    put(shadow_pods.shadows, shadow("first", cpu="7"))
    await shadow_pods.reconcile(f"{TWIN}/first")
    assert creations(api) == [f"{TWIN}/first"]

    # Before the pod's event, the peer lowers the spec and the ShadowPod's event comes first: the API server
    # is asked, the pod found, its 7 CPU still held; nothing is made again.
    put(shadow_pods.shadows, shadow("first", cpu="10m"))
    await shadow_pods.reconcile(f"{TWIN}/first")
    assert creations(api) == [f"{TWIN}/first"]
    assert gets(api) == [f"{TWIN}/first"]
    put(shadow_pods.shadows, shadow("second", cpu="7"))
    await shadow_pods.reconcile(f"{TWIN}/second")
    assert creations(api) == [f"{TWIN}/first"]
    assert statuses(api)[f"{TWIN}/second"]["reason"] == "OverBudget"

    # The phase flipped away and back before the cache showed the pod: its room is not let go while it runs.
    set_offer(shadow_pods, phase="Refused")
    await shadow_pods.reconcile(f"{TWIN}/first")
    assert pods(api)[f"{TWIN}/first"]["metadata"].get("deletionTimestamp")  # stopped, still terminating
    set_offer(shadow_pods, phase="Accepted")
    await shadow_pods.reconcile(f"{TWIN}/second")
    assert creations(api) == [f"{TWIN}/first"]
    assert shadow_pods.ledger.in_use(CONSUMER).requests["cpu"] == 7

    # Once the cache has shown the pod, it is not asked for again; gone, its room is free: first is made
    # again as its spec says now (10m), and second fits beside it.
    put(shadow_pods.pods, pods(api)[f"{TWIN}/first"])
    await shadow_pods.reconcile(f"{TWIN}/first")
    asked = len(gets(api))
    api.remove(PODS, "first", namespace=TWIN)
    drop(shadow_pods.pods, f"{TWIN}/first")
    await shadow_pods.reconcile(f"{TWIN}/first")
    await shadow_pods.reconcile(f"{TWIN}/second")
    assert len(gets(api)) == asked
    assert creations(api) == [f"{TWIN}/first", f"{TWIN}/first", f"{TWIN}/second"]
    assert cpu_of(api, f"{TWIN}/first") == "10m"


async def test_a_creation_without_an_answer_keeps_its_room_until_the_pod_is_known_absent() -> None:
    api = FakeApi()
    shadow_pods = controller(api)
    api.refuse("create", PODS, UnreachableError("milan: timed out"), times=1, after=True)  # made all the same
    put(shadow_pods.shadows, shadow("first", cpu="7"))
    result = await shadow_pods.reconcile(f"{TWIN}/first")
    assert result is not None  # tried again later
    put(shadow_pods.shadows, shadow("second", cpu="7"))
    await shadow_pods.reconcile(f"{TWIN}/second")
    assert creations(api) == [f"{TWIN}/first"]  # second waits: first may run

    await shadow_pods.reconcile(f"{TWIN}/first")  # found: counted, not made again
    assert creations(api) == [f"{TWIN}/first"]
    api.remove(PODS, "first", namespace=TWIN)  # gone before the cache ever showed it
    await shadow_pods.reconcile(f"{TWIN}/first")  # known absent: admitted afresh, made again
    assert creations(api) == [f"{TWIN}/first", f"{TWIN}/first"]
    assert shadow_pods.ledger.in_use(CONSUMER).requests["cpu"] == 7


async def test_a_pod_is_made_without_the_keys_off_the_list_and_a_normal_event_names_them() -> None:
    """A Helm chart's pod, labelled by ``liqoctl test network`` and told to Istio: it runs, without those keys."""
    api = FakeApi()
    shadow_pods = controller(api)
    charted = shadow("charted", cpu="10m")
    charted["metadata"]["labels"] |= {"app": "shop", "helm.sh/chart": "shop-1.0.0", "liqo.io/netcheck": "remote"}
    charted["metadata"]["annotations"] = {"sidecar.istio.io/inject": "true", "kubectl.kubernetes.io/restartedAt": "x"}
    plain = shadow("plain", cpu="10m")
    for made in (charted, plain):
        put(shadow_pods.shadows, made)
        await shadow_pods.reconcile(object_key(made))
    assert creations(api) == [f"{TWIN}/charted", f"{TWIN}/plain"]
    meta = pods(api)[f"{TWIN}/charted"]["metadata"]
    assert meta["labels"] == names.peer_labels(CONSUMER) | {"app": "shop", names.SHADOW_POD: "charted"}
    assert meta["annotations"] == {"kubectl.kubernetes.io/restartedAt": "x", names.HOME_POD_UID: ""}
    # On the ShadowPod, and on the pod (whose Events the consumer's virtual kubelet mirrors home); none for plain.
    on_shadow, on_pod = events(api)
    assert (on_shadow["involvedObject"]["kind"], on_shadow["involvedObject"]["uid"]) == ("ShadowPod", "uid-charted")
    assert (on_pod["involvedObject"]["kind"], on_pod["involvedObject"]["uid"]) == ("Pod", meta["uid"])
    for event in (on_shadow, on_pod):
        assert (event["type"], event["reason"], event["involvedObject"]["name"]) == (
            "Normal",
            KEYS_NOT_COPIED,
            "charted",
        )
        for key in (
            "metadata.labels[helm.sh/chart]",
            "metadata.labels[liqo.io/netcheck]",
            "metadata.annotations[sidecar.istio.io/inject]",
            "podSecurity.allowedLabelKeys",
            "podSecurity.allowedAnnotationKeys",
        ):
            assert key in event["message"], event["message"]
    assert f"{TWIN}/charted" not in statuses(api)  # nothing refused, nothing waiting


# -- storage: a pod's claims, counted from its admission until deleted ----------------------------------------

LOCAL = ClassOffer(name="local", capacity=Decimal(3 * 2**30))


def storing(api: FakeApi) -> ShadowPods:
    """A controller whose consumer is offered 3Gi of ``local`` (policy and accepted offer)."""
    made = controller(api, policy=Policy(pod_security=PodSecurity(storage=(LOCAL,))))
    made.offers._cache[f"{names.tenant_namespace(CONSUMER)}/{PROVIDER}"]["spec"]["storage"] = [
        {"class": "local", "capacity": "3Gi"}
    ]
    return made


def claim(name: str, size: str, *, bound: bool = False) -> Obj:
    status = {"phase": "Bound", "capacity": {"storage": size}} if bound else {"phase": "Pending"}
    return {
        "metadata": {"name": name, "namespace": TWIN, "uid": f"uid-{name}"},
        "spec": {"storageClassName": "local", "resources": {"requests": {"storage": size}}},
        "status": status,
    }


def with_claim(made: Obj, claim_name: str) -> Obj:
    made["spec"]["pod"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    return made


async def test_a_pod_waits_for_its_claim_and_is_made_once_the_claim_comes() -> None:
    api = FakeApi()
    shadow_pods = storing(api)
    put(shadow_pods.shadows, with_claim(shadow("web-0", cpu="10m"), "data"))
    await shadow_pods.reconcile(f"{TWIN}/web-0")
    assert creations(api) == []
    status = statuses(api)[f"{TWIN}/web-0"]
    assert (status["phase"], status["reason"]) == ("Waiting", "ClaimMissing")
    # The claim comes: its event wakes the waiting ShadowPod, which is made.
    put(shadow_pods.claims, claim("data", "1Gi"))
    await shadow_pods.reconcile_claim(f"{TWIN}/data")
    assert len(shadow_pods.controller.queue) == 1
    await shadow_pods.reconcile(f"{TWIN}/web-0")
    assert creations(api) == [f"{TWIN}/web-0"]
    assert shadow_pods.claim_ledger.held(CONSUMER) == {"local": Decimal(2**30)}


async def test_claims_with_volumes_count_after_a_restart_and_only_a_deletion_frees_them() -> None:
    """A restarted controller counts every claim with a volume, beyond the budget if so; new claims then wait."""
    api = FakeApi()
    shadow_pods = storing(api)
    put(shadow_pods.claims, claim("old", "2Gi", bound=True))
    put(shadow_pods.claims, claim("new", "2Gi"))
    put(shadow_pods.shadows, with_claim(shadow("web-1", cpu="10m"), "new"))
    await shadow_pods.reconcile(f"{TWIN}/web-1")
    assert creations(api) == []
    status = statuses(api)[f"{TWIN}/web-1"]
    assert (status["phase"], status["reason"]) == ("Waiting", "OverBudget")
    assert "storage of class local" in status["message"]
    drop(shadow_pods.claims, f"{TWIN}/old")
    await shadow_pods.reconcile_claim(f"{TWIN}/old")
    await shadow_pods.reconcile(f"{TWIN}/web-1")
    assert creations(api) == [f"{TWIN}/web-1"]
