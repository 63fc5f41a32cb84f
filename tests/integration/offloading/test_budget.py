"""One budget per consumer, enforced by the provider alone, and plain pods run (docs/security.md).

rome consumes from milan. The attacks are made with rome's own identity on milan (the kubeconfig milan
issued it), with rome's manager and virtual kubelet stopped so that nothing of ours corrects or hides what
the peer writes; the ordinary paths go through rome's scheduler and virtual kubelet as a user's pods do.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections.abc import AsyncIterator, Mapping
from decimal import Decimal

import pytest

from liqo.api import names
from liqo.api.components import MANAGER, VIRTUAL_KUBELET
from liqo.api.podrequests import pod_requests
from liqo.api.quantity import parse_quantity
from liqo.api.resources import NAMESPACE_MAPS, RESOURCE_OFFERS, SHADOW_PODS, SHARING_POLICIES, VIRTUAL_NODES
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import DEPLOYMENTS, NAMESPACES, NODES, PODS, Resource
from liqo.localclusters import clusters
from liqo.peering import operations
from tests.integration.helpers import (
    Offloaded,
    Site,
    deployment,
    drop_offloaded,
    expect_clean,
    made_once_allowed,
    offload_fresh,
    peer_identity,
    pod,
    recorded_event,
    running,
    running_pods,
    shadow_pod,
    sharing_policy,
    stopped,
    unique,
)
from tests.shared import eventually

ROME_COMPONENTS = [MANAGER, VIRTUAL_KUBELET]
_ADMISSION = "admissionregistration.k8s.io"
ADMISSION_POLICIES = Resource(
    _ADMISSION, "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", namespaced=False
)
ADMISSION_POLICY_BINDINGS = Resource(
    _ADMISSION, "v1", "validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", namespaced=False
)


async def offer_on(milan: KubeClient, sites: dict[str, Site]) -> Obj:
    return await milan.get(
        RESOURCE_OFFERS, sites["milan"].cluster_id, namespace=names.tenant_namespace(sites["rome"].cluster_id)
    )


async def budget_cpu(milan: KubeClient, sites: dict[str, Site], cpu: str) -> None:
    """Wait until milan's accepted offer to rome (and so rome's virtual node) holds ``cpu`` CPUs."""

    async def offered() -> bool:
        try:
            offer = await offer_on(milan, sites)
        except NotFoundError:
            return False
        return offer["spec"]["resources"].get("cpu") == cpu and (offer.get("status") or {}).get("phase") == "Accepted"

    await eventually(offered, timeout=30, message=f"milan's offer to rome accepted with cpu={cpu}")


async def shadows_in(milan: KubeClient, twins: list[str]) -> dict[str, Obj]:
    found: dict[str, Obj] = {}
    for twin in twins:
        for shadow in (await milan.list_all(SHADOW_PODS, namespace=twin))[0]:
            found[f"{twin}/{shadow['metadata']['name']}"] = shadow
    return found


async def pods_in(milan: KubeClient, twins: list[str]) -> dict[str, Obj]:
    found: dict[str, Obj] = {}
    for twin in twins:
        for made in (await milan.list_all(PODS, namespace=twin))[0]:
            found[f"{twin}/{made['metadata']['name']}"] = made
    return found


def phase(shadow: Obj) -> tuple[str | None, str | None]:
    status = shadow.get("status") or {}
    return status.get("phase"), status.get("reason")


def home_reason(pod: Obj) -> str:
    conditions = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}
    return str((conditions.get("Ready") or {}).get("reason", ""))


# -- plain pods run ----------------------------------------------------------------------------------------------


async def test_kubectl_create_deployment_nginx_runs_remotely(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """The first thing a user types: no requests at all, and the pods run (BestEffort, one ``pods`` each)."""
    command = [
        *sites["rome"].cluster.kubectl(),
        *("create", "deployment", "nginx", "--image=nginx", "--replicas=4", "-n", offloaded.namespace),
    ]
    created = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=30, check=False)
    assert created.returncode == 0, created.stderr
    home = await running_pods(rome, offloaded.namespace, 4)
    remote = await running_pods(milan, offloaded.twin, 4)
    assert {p["metadata"]["name"] for p in home} == {p["metadata"]["name"] for p in remote}
    assert all(p["spec"]["nodeName"] == offloaded.node for p in home)
    assert {p["status"]["qosClass"] for p in remote} == {"BestEffort"}
    shadows = await shadows_in(milan, [offloaded.twin])
    assert len(shadows) == 4
    assert all(phase(s) == (None, None) for s in shadows.values())  # no status write on the happy path


# -- one budget across every twin ----------------------------------------------------------------------------------


async def test_three_offloaded_namespaces_together_get_one_budget(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    more = [await offload_fresh(rome, sites["rome"].cluster_id) for _ in range(2)]
    twins = [offloaded.twin, *(o.twin for o in more)]
    try:
        async with sharing_policy(milan, rome_id, prefix="budget", percentage=100, limits={"cpu": "1"}):
            await budget_cpu(milan, sites, "1")
            async with peer_identity(rome, milan_id) as peer, stopped(sites["rome"], *ROME_COMPONENTS):
                # Six pods of 400m, two per twin: each twin alone would fit two, together only two fit at all.
                for twin in twins:
                    for name in ("a", "b"):
                        await peer.create(SHADOW_PODS, shadow_pod(name, twin, rome_id, cpu="400m"))

                async def decided() -> bool:
                    shadows = await shadows_in(milan, twins)
                    waiting = [s for s in shadows.values() if phase(s) == ("Waiting", "OverBudget")]
                    return len(waiting) == 4 and len(await pods_in(milan, twins)) == 2

                await eventually(decided, timeout=60, message="two pods running, four ShadowPods over budget")
                shadows = await shadows_in(milan, twins)
                pods = await pods_in(milan, twins)
                assert all(running(p) or p["status"].get("phase") == "Pending" for p in pods.values())
                assert all(phase(shadows[key]) == (None, None) for key in pods)  # admitted: never a status write
                waiting = [s for key, s in shadows.items() if key not in pods]
                for shadow in waiting:
                    message = shadow["status"]["message"]
                    assert message.startswith("cpu requests: the pod requests 400m"), message
                    assert "exceed the 1 its accepted offer allows" in message

                # One leaves: exactly one waiting pod takes its room, by itself.
                gone = sorted(pods)[0]
                twin, name = gone.split("/")
                await peer.delete(SHADOW_PODS, name, namespace=twin)

                async def replaced() -> bool:
                    now = await pods_in(milan, twins)
                    shadows = await shadows_in(milan, twins)
                    return gone not in shadows and len(now) == 2 and set(now) != set(pods) - {gone}

                await eventually(replaced, timeout=60, message="a waiting ShadowPod got the room that freed")
                started = next(iter(set(await pods_in(milan, twins)) - set(pods)))
                await eventually(
                    lambda: _phase_is(milan, started, ("Created", None)),
                    timeout=30,
                    message="the started ShadowPod's status says Created again",
                )

                # A restarted manager rebuilds the ledger from the pods that exist: a new pod still waits.
                await asyncio.to_thread(clusters.set_components, sites["milan"].cluster.name, [MANAGER], enabled=False)
                await asyncio.to_thread(clusters.set_components, sites["milan"].cluster.name, [MANAGER], enabled=True)

                await made_once_allowed(  # the restarted manager's webhook answers 503 until its caches are loaded
                    lambda: peer.create(SHADOW_PODS, shadow_pod("late", twins[0], rome_id, cpu="400m")),
                    refused_with=503,
                    timeout=30,
                    message="the restarted manager admits ShadowPods again",
                )
                await eventually(
                    lambda: _phase_is(milan, f"{twins[0]}/late", ("Waiting", "OverBudget")),
                    timeout=60,
                    message="a pod created after the restart waits: the running ones are counted",
                )
                assert len(await pods_in(milan, twins)) == 2
                for key in await shadows_in(milan, twins):
                    twin, name = key.split("/")
                    await peer.delete(SHADOW_PODS, name, namespace=twin)
                await eventually(
                    lambda: _empty(milan, twins), timeout=60, message="every ShadowPod and pod gone from the twins"
                )
    finally:
        for extra in more:
            await drop_offloaded(rome, extra.namespace)


async def _phase_is(milan: KubeClient, key: str, expected: tuple[str | None, str | None]) -> bool:
    namespace, name = key.split("/")
    try:
        return phase(await milan.get(SHADOW_PODS, name, namespace=namespace)) == expected
    except NotFoundError:
        return False


async def _empty(milan: KubeClient, twins: list[str]) -> bool:
    return not await shadows_in(milan, twins) and not await pods_in(milan, twins)


# -- the offer's status is the consumer's: it can refuse, never enlarge -----------------------------------------


async def test_the_consumer_writing_the_offer_status_lifts_nothing(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    twin = offloaded.twin
    async with sharing_policy(milan, rome_id, prefix="budget", percentage=100, limits={"cpu": "1"}):
        await budget_cpu(milan, sites, "1")
        offered = (await offer_on(milan, sites))["spec"]["resources"]
        async with peer_identity(rome, milan_id) as peer, stopped(sites["rome"], *ROME_COMPONENTS):
            await peer.create(SHADOW_PODS, shadow_pod("big", twin, rome_id, cpu="1500m"))
            await peer.create(SHADOW_PODS, shadow_pod("small", twin, rome_id, cpu="300m"))
            await running_pods(milan, twin, 1)
            await eventually(
                lambda: _phase_is(milan, f"{twin}/big", ("Waiting", "OverBudget")), timeout=30, message="big waits"
            )

            # The offer's spec is the provider's: the identity may not write it.
            with pytest.raises(ApiError) as refused:
                await peer.patch(
                    RESOURCE_OFFERS,
                    milan_id,
                    {"spec": {"resources": {"cpu": "100"}}},
                    namespace=names.tenant_namespace(rome_id),
                )
            assert refused.value.status == 403

            # A phase other than Accepted: the consumer stops its own pods; the ShadowPods stay, waiting.
            tenant = names.tenant_namespace(rome_id)
            await peer.patch(
                RESOURCE_OFFERS, milan_id, {"status": {"phase": "Refused"}}, namespace=tenant, subresource="status"
            )

            async def stopped_pods() -> bool:
                shadows = await shadows_in(milan, [twin])
                return not await pods_in(milan, [twin]) and all(
                    phase(s) == ("Waiting", "NoAcceptedOffer") for s in shadows.values()
                )

            await eventually(stopped_pods, timeout=30, message="no pod of rome's, both ShadowPods NoAcceptedOffer")
            small = await milan.get(SHADOW_PODS, "small", namespace=twin)
            assert "its phase is Refused" in small["status"]["message"]

            # Accepted again, with a larger "offer" slipped into the same status write: the pod that fits
            # runs again, the one that did not still waits, and the offer is what milan made it.
            await peer.patch(
                RESOURCE_OFFERS,
                milan_id,
                {"status": {"phase": "Accepted", "resources": {"cpu": "100"}}, "spec": {"resources": {"cpu": "100"}}},
                namespace=tenant,
                subresource="status",
            )
            await running_pods(milan, twin, 1)
            await eventually(
                lambda: _phase_is(milan, f"{twin}/big", ("Waiting", "OverBudget")),
                timeout=30,
                message="big waits over budget again once the offer is accepted",
            )
            assert (await offer_on(milan, sites))["spec"]["resources"] == offered
            assert [p["metadata"]["name"] for p in (await milan.list_all(PODS, namespace=twin))[0]] == ["small"]
            for name in ("big", "small"):
                await peer.delete(SHADOW_PODS, name, namespace=twin)
            await eventually(lambda: _empty(milan, [twin]), timeout=60, message="the twin emptied")


async def test_a_smaller_offer_keeps_the_running_pods_and_holds_back_new_ones(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    twin = offloaded.twin
    async with sharing_policy(milan, rome_id, prefix="budget", limits={"cpu": "1"}) as name:
        await budget_cpu(milan, sites, "1")
        async with peer_identity(rome, milan_id) as peer, stopped(sites["rome"], *ROME_COMPONENTS):
            for pod_name in ("one", "two"):
                await peer.create(SHADOW_PODS, shadow_pod(pod_name, twin, rome_id, cpu="400m"))
            before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await running_pods(milan, twin, 2)}

            # The provider's admin shrinks the share: the offer is refreshed below what runs.
            await milan.patch(SHARING_POLICIES, name, {"spec": {"limits": {"cpu": "500m"}}})
            await budget_cpu(milan, sites, "500m")
            await peer.create(SHADOW_PODS, shadow_pod("three", twin, rome_id, cpu="100m"))
            await eventually(
                lambda: _phase_is(milan, f"{twin}/three", ("Waiting", "OverBudget")),
                timeout=30,
                message="a new pod waits under the smaller offer",
            )
            three = await milan.get(SHADOW_PODS, "three", namespace=twin)
            assert "exceed the 500m its accepted offer allows" in three["status"]["message"]
            now = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await running_pods(milan, twin, 2)}
            assert now == before  # the running ones were left alone

            # Back within the offer (400m + 100m of 500m): the waiting one starts by itself.
            await peer.delete(SHADOW_PODS, "one", namespace=twin)
            await eventually(
                lambda: _phase_is(milan, f"{twin}/three", ("Created", None)),
                timeout=60,
                message="the waiting pod started once the consumer was back under the smaller offer",
            )
            assert {p["metadata"]["name"] for p in await running_pods(milan, twin, 2)} == {"two", "three"}
            for pod_name in ("two", "three"):
                await peer.delete(SHADOW_PODS, pod_name, namespace=twin)
            await eventually(lambda: _empty(milan, [twin]), timeout=60, message="the twin emptied")


# -- no budget: before acceptance, after a Deny ---------------------------------------------------------------


async def test_no_pod_runs_in_a_twin_before_the_offer_is_accepted(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, not_peered: None
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    tenant = names.tenant_namespace(rome_id)
    command = await operations.peer_command(milan)
    await operations.peer_out_of_band(rome, command, offer_policy={"mode": "Manual"})
    try:

        async def offered() -> bool:
            try:
                offer = await offer_on(milan, sites)
            except NotFoundError:
                return False
            return (offer.get("status") or {}).get("phase") == "ManualActionRequired"

        await eventually(offered, timeout=60, message="milan's offer to rome, waiting for rome's decision")
        async with peer_identity(rome, milan_id) as peer, stopped(sites["rome"], *ROME_COMPONENTS):
            home = unique("early")
            twin = names.twin_namespace(home, home_cluster_id=rome_id)
            namespace_map = {
                "apiVersion": NAMESPACE_MAPS.api_version,
                "kind": NAMESPACE_MAPS.kind,
                "metadata": {"name": rome_id, "namespace": tenant},
                "spec": {"consumerClusterID": rome_id, "mappings": {home: twin}},
            }
            await peer.create(NAMESPACE_MAPS, namespace_map)

            async def twin_ready() -> bool:
                found = await milan.get(NAMESPACE_MAPS, rome_id, namespace=tenant)
                return bool(((found.get("status") or {}).get("mappings") or {}).get(home, {}).get("phase") == "Ready")

            await eventually(twin_ready, timeout=60, message="milan made the twin rome asked for")
            # Before it accepts an offer, the consumer writes nothing there (docs/security.md, "Twins' bounds")...
            with pytest.raises(ApiError) as refused:
                await peer.create(SHADOW_PODS, shadow_pod("eager", twin, rome_id, cpu="100m"))
            assert refused.value.status == 403
            # ...and a ShadowPod there all the same (milan's admin's) waits for an accepted offer.
            await milan.create(SHADOW_PODS, shadow_pod("eager", twin, rome_id, cpu="100m"))
            await eventually(
                lambda: _phase_is(milan, f"{twin}/eager", ("Waiting", "NoAcceptedOffer")),
                timeout=30,
                message="the ShadowPod waits for an accepted offer",
            )
            assert not (await milan.list_all(PODS, namespace=twin))[0]
            shadow = await milan.get(SHADOW_PODS, "eager", namespace=twin)
            assert "its phase is ManualActionRequired" in shadow["status"]["message"]

            # Accepting (the consumer's one right on the offer) is what lets it run.
            await peer.patch(
                RESOURCE_OFFERS, milan_id, {"status": {"phase": "Accepted"}}, namespace=tenant, subresource="status"
            )
            await running_pods(milan, twin, 1)
            await peer.delete(SHADOW_PODS, "eager", namespace=twin)
            await eventually(lambda: _empty(milan, [twin]), timeout=60, message="the twin emptied")
            await peer.delete(NAMESPACE_MAPS, rome_id, namespace=tenant)

            async def twin_gone() -> bool:
                try:
                    await milan.get(NAMESPACES, twin)
                except NotFoundError:
                    return True
                return False

            await eventually(twin_gone, timeout=60, message="the twin deleted with the map")
    finally:
        await operations.unpeer(rome, milan_id, timeout=90)
    await expect_clean(rome, milan)


async def test_after_a_deny_the_pods_stop_and_run_again_when_shared(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    rome_id = sites["rome"].cluster_id
    await rome.create(DEPLOYMENTS, deployment("steady", offloaded.namespace, replicas=2))
    await running_pods(milan, offloaded.twin, 2)
    first = {p["metadata"]["name"] for p in await running_pods(rome, offloaded.namespace, 2)}
    async with sharing_policy(milan, rome_id, prefix="budget", action="Deny"):

        async def stopped_everywhere() -> bool:
            remote = (await milan.list_all(PODS, namespace=offloaded.twin))[0]
            home = (await rome.list_all(PODS, namespace=offloaded.namespace))[0]
            return not remote and len(home) == 2 and all(p["status"].get("phase") == "Pending" for p in home)

        await eventually(stopped_everywhere, timeout=150, message="no pod in milan, rome's pods Pending")
        # Replaced at once by the virtual kubelet that deleted their Node, not 40 s later by the pod GC.
        for name in first:
            event = await recorded_event(rome, namespace=offloaded.namespace, reason="VirtualNodeDeleted", about=name)
            assert event["reportingComponent"] == VIRTUAL_KUBELET, event
        waiting: dict[str, tuple[str | None, str | None]] = {}

        async def left_shadows_wait() -> bool:
            # Those rome has not withdrawn yet wait; one rome has just written may not have a status yet.
            shadows = (await shadows_in(milan, [offloaded.twin])).values()
            waiting.clear()
            left = [s for s in shadows if not s["metadata"].get("deletionTimestamp")]
            waiting.update((s["metadata"]["name"], phase(s)) for s in left)
            return all(p == ("Waiting", "NoAcceptedOffer") for p in waiting.values())

        await eventually(left_shadows_wait, timeout=30, message=lambda: f"shadows Waiting/NoAcceptedOffer: {waiting}")
        for home in (await rome.list_all(PODS, namespace=offloaded.namespace))[0]:
            # The virtual node goes with the offer: its pods are replaced by Pending ones nothing can schedule,
            # until then they show milan's reason.
            scheduled = {c["type"]: c for c in home["status"].get("conditions") or []}.get("PodScheduled") or {}
            assert home_reason(home) == "NoAcceptedOffer" or scheduled.get("reason") == "Unschedulable", home["status"]
    await running_pods(rome, offloaded.namespace, 2)
    await running_pods(milan, offloaded.twin, 2)
    nodes = (await rome.list_all(NODES, label_selector=f"{names.REMOTE_CLUSTER_ID}={sites['milan'].cluster_id}"))[0]
    assert len(nodes) == 1


# -- through the home path: a pod over budget starts by itself -----------------------------------------------------


async def test_a_pod_over_budget_waits_at_home_and_starts_once_room_frees(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """Home schedules by requests (the virtual node's capacity is the offer); milan also counts limits."""
    rome_id = sites["rome"].cluster_id
    async with sharing_policy(milan, rome_id, prefix="budget", limits={"cpu": "1"}):
        await budget_cpu(milan, sites, "1")

        async def node_shrunk() -> bool:
            node = (await rome.list_all(VIRTUAL_NODES, namespace=names.tenant_namespace(sites["milan"].cluster_id)))[0]
            return bool(node) and node[0]["spec"]["resources"]["cpu"] == "1"

        await eventually(node_shrunk, timeout=30, message="rome's virtual node follows the smaller offer")
        bursty = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"cpu": "400m"}}

        def with_limits(name: str, replicas: int) -> Obj:
            body = deployment(name, offloaded.namespace, replicas=replicas)
            body["spec"]["template"]["spec"]["containers"][0]["resources"] = bursty
            return body

        await rome.create(DEPLOYMENTS, with_limits("first", 2))
        await running_pods(milan, offloaded.twin, 2)  # 800m of limits out of 1
        await rome.create(DEPLOYMENTS, with_limits("second", 1))

        async def over_budget() -> list[Obj]:
            pods = (await rome.list_all(PODS, namespace=offloaded.namespace, label_selector="app=second"))[0]
            return [p for p in pods if home_reason(p) == "OverBudget"]

        async def waits() -> bool:
            return bool(await over_budget())

        await eventually(waits, timeout=60, message="the second Deployment's pod Pending at home with OverBudget")
        [waiting] = await over_budget()
        assert waiting["status"]["phase"] == "Pending"
        assert waiting["spec"]["nodeName"] == offloaded.node  # home's scheduler saw room: requests fit
        assert waiting["status"]["message"].startswith("cpu limits: the pod declares limits of 400m")

        await rome.patch(DEPLOYMENTS, "first", {"spec": {"replicas": 1}}, namespace=offloaded.namespace)

        async def started() -> bool:
            try:
                pod = await rome.get(PODS, waiting["metadata"]["name"], namespace=offloaded.namespace)
            except NotFoundError:
                return False
            return running(pod) and pod["metadata"]["uid"] == waiting["metadata"]["uid"]

        await eventually(started, timeout=90, message="the waiting pod started by itself once room freed")
        remote = await running_pods(milan, offloaded.twin, 2)
        limits = sum(
            (parse_quantity(p["spec"]["containers"][0]["resources"]["limits"]["cpu"]) for p in remote), Decimal(0)
        )
        assert limits <= 1


# -- refusals are retried, never dropped ---------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def closed(milan: KubeClient, *, group: str, plural: str, namespace: str, probe: Obj) -> AsyncIterator[str]:
    """milan's own admission refusing every creation of ``plural`` in ``namespace`` for a while (422)."""
    name = unique("closed")
    message = f"{plural} are closed in {namespace} for a while"
    await milan.create(
        ADMISSION_POLICIES,
        {
            "apiVersion": f"{_ADMISSION}/v1",
            "kind": ADMISSION_POLICIES.kind,
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [group], "apiVersions": ["*"], "operations": ["CREATE"], "resources": [plural]}
                    ]
                },
                "validations": [{"expression": "false", "message": message}],
            },
        },
    )
    await milan.create(
        ADMISSION_POLICY_BINDINGS,
        {
            "apiVersion": f"{_ADMISSION}/v1",
            "kind": ADMISSION_POLICY_BINDINGS.kind,
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            },
        },
    )
    resource = SHADOW_PODS if plural == "shadowpods" else PODS

    async def enforced() -> bool:
        try:
            await milan.create(resource, probe, dry_run=True)
        except ApiError as exc:
            return message in exc.message
        return False

    try:
        await eventually(enforced, timeout=30, message=f"milan refusing {plural} in {namespace}")
        yield message
    finally:
        await milan.delete(ADMISSION_POLICY_BINDINGS, name)
        await milan.delete(ADMISSION_POLICIES, name)


async def test_refusals_are_retried_until_they_pass_on_both_sides(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """A refused ShadowPod write (rome) and a refused pod creation (milan) are tried again until they pass."""
    rome_id = sites["rome"].cluster_id

    async def home_refused(name: str, message: str) -> bool:
        pod = await rome.get(PODS, name, namespace=offloaded.namespace)
        ready = {c["type"]: c for c in (pod.get("status") or {}).get("conditions") or []}.get("Ready") or {}
        return ready.get("reason") == "ProviderRefused" and message in ready.get("message", "")

    async def home_running(name: str) -> bool:
        return running(await rome.get(PODS, name, namespace=offloaded.namespace))

    # The ShadowPod write refused (422): the home pod says why; once milan takes it, the pod runs.
    probe = shadow_pod("probe", offloaded.twin, rome_id, cpu="10m")
    async with closed(
        milan, group="virtualkubelet.liqo.io", plural="shadowpods", namespace=offloaded.twin, probe=probe
    ) as why:
        await rome.create(PODS, pod("first", offloaded.namespace))
        await eventually(lambda: home_refused("first", why), timeout=30, message="the home pod shows milan's refusal")
    await eventually(lambda: home_running("first"), timeout=90, message="the ShadowPod written again, the pod running")

    # The pod refused by milan's API server: the ShadowPod says Refused, the home pod shows it; retried.
    probe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": offloaded.twin}}
    probe["spec"] = {"containers": [{"name": "app", "image": "nginx"}]}
    async with closed(milan, group="", plural="pods", namespace=offloaded.twin, probe=probe) as why:
        await rome.create(PODS, pod("second", offloaded.namespace))
        await eventually(
            lambda: _phase_is(milan, f"{offloaded.twin}/second", ("Refused", "PodRefused")),
            timeout=30,
            message="milan's ShadowPod controller reports the refusal",
        )
        await eventually(lambda: home_refused("second", why), timeout=30, message="the home pod shows it")
    await eventually(lambda: home_running("second"), timeout=90, message="milan created the pod on a later try")
    await eventually(
        lambda: _phase_is(milan, f"{offloaded.twin}/second", ("Created", None)),
        timeout=30,
        message="the ShadowPod's status says Created",
    )


# -- after admission: nothing the peer changes lets a pod run beyond the budget -----------------------------------


class CpuHeld:
    """The CPU that a twin's pods request together, in every state milan's API server had them (a watch).

    A pod counts from its creation until it is gone or finished: a terminating pod still holds its node.
    """

    def __init__(self) -> None:
        self.pods: dict[str, Decimal] = {}
        self.most = Decimal(0)
        self.most_by: list[str] = []

    def see(self, event: Obj) -> None:
        found = event["object"]
        name = found["metadata"]["name"]
        if event["type"] == "DELETED" or (found.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self.pods.pop(name, None)
        else:
            self.pods[name] = pod_requests(found).get("cpu", Decimal(0))
        total = sum(self.pods.values(), Decimal(0))
        if total > self.most:
            self.most, self.most_by = total, sorted(f"{n}={c}" for n, c in self.pods.items())

    def within(self, cpu: str) -> bool:
        assert self.most <= parse_quantity(cpu), f"milan ran {self.most} CPU for rome at once ({self.most_by})"
        return True


@contextlib.asynccontextmanager
async def cpu_held(milan: KubeClient, twin: str) -> AsyncIterator[CpuHeld]:
    """Follow every pod of ``twin`` from now on, by a watch: no state in between two polls goes unseen."""
    held = CpuHeld()
    pods, version = await milan.list_all(PODS, namespace=twin)
    for found in pods:
        held.see({"type": "ADDED", "object": found})

    async def follow() -> None:
        async for event in milan.watch(PODS, resource_version=version, namespace=twin, timeout_seconds=900):
            if event["type"] != "BOOKMARK":
                held.see(event)

    task = asyncio.create_task(follow())
    try:
        yield held
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def raised_to(cpu: str, twin: str, rome_id: str) -> Obj:
    """The merge patch a peer sends to make a ShadowPod's pod ask for ``cpu``."""
    return {"spec": {"pod": shadow_pod("any", twin, rome_id, cpu=cpu)["spec"]["pod"]}}


async def test_a_pod_raised_after_admission_is_judged_again_when_its_pod_is_made_again(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """``spec.pod`` of an admitted ShadowPod raised to more than the whole offer: its pod is made again (the
    provider's admin deleted it, as a drain would) only if it fits, from the spec as it is then."""
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    twin = offloaded.twin
    async with sharing_policy(milan, rome_id, prefix="budget", percentage=100, limits={"cpu": "8"}):
        await budget_cpu(milan, sites, "8")
        async with (
            peer_identity(rome, milan_id) as peer,
            stopped(sites["rome"], *ROME_COMPONENTS),
            cpu_held(milan, twin) as held,
        ):
            await peer.create(SHADOW_PODS, shadow_pod("big", twin, rome_id, cpu="7"))
            await peer.create(SHADOW_PODS, shadow_pod("small", twin, rome_id, cpu="10m"))
            before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in await running_pods(milan, twin, 2)}

            await peer.patch(SHADOW_PODS, "small", raised_to("64", twin, rome_id), namespace=twin)
            await milan.delete(PODS, "small", namespace=twin, uid=before["small"])

            async def small_waits() -> bool:
                return held.within("8") and await _phase_is(milan, f"{twin}/small", ("Waiting", "OverBudget"))

            await eventually(small_waits, timeout=60, message="small, raised to 64 CPU, waits once its pod is gone")
            small = await milan.get(SHADOW_PODS, "small", namespace=twin)
            assert small["status"]["message"].startswith("cpu requests: the pod requests 64,"), small["status"]
            remaining = {
                p["metadata"]["name"]: p["metadata"]["uid"] for p in (await milan.list_all(PODS, namespace=twin))[0]
            }
            assert remaining == {"big": before["big"]}
            assert held.within("8")
            for name in ("big", "small"):
                await peer.delete(SHADOW_PODS, name, namespace=twin)
            await eventually(lambda: _empty(milan, [twin]), timeout=90, message="the twin emptied")


HELD = "liqo.io.test/still-terminating"
"""A finalizer milan's admin puts on the pods: kwok removes a deleted pod at once, where a kubelet lets it run
for its grace period (up to the policy's cap, 120 s, all of it for a container that ignores SIGTERM)."""


async def hold_terminating(milan: KubeClient, twin: str, name: str, *, held: bool) -> None:
    with contextlib.suppress(NotFoundError):
        await milan.patch(PODS, name, {"metadata": {"finalizers": [HELD] if held else None}}, namespace=twin)


async def test_flipping_the_offer_phase_never_runs_more_than_the_budget(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """Two 7-CPU ShadowPods on an 8-CPU offer (one raised from 10m after admission), the offer's phase set
    away from Accepted and back while their pods still terminate: one runs, the other waits, never both."""
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    twin, tenant = offloaded.twin, names.tenant_namespace(rome_id)
    async with sharing_policy(milan, rome_id, prefix="budget", percentage=100, limits={"cpu": "8"}):
        await budget_cpu(milan, sites, "8")
        async with (
            peer_identity(rome, milan_id) as peer,
            stopped(sites["rome"], *ROME_COMPONENTS),
            cpu_held(milan, twin) as held,
        ):
            try:
                await peer.create(SHADOW_PODS, shadow_pod("big", twin, rome_id, cpu="7"))
                await peer.create(SHADOW_PODS, shadow_pod("small", twin, rome_id, cpu="10m"))
                await running_pods(milan, twin, 2)
                for name in ("big", "small"):
                    await hold_terminating(milan, twin, name, held=True)
                await peer.patch(SHADOW_PODS, "small", raised_to("7", twin, rome_id), namespace=twin)

                async def set_phase(value: str) -> None:
                    await peer.patch(
                        RESOURCE_OFFERS, milan_id, {"status": {"phase": value}}, namespace=tenant, subresource="status"
                    )

                async def shadows_say(expected: Mapping[str, tuple[str | None, str | None]]) -> bool:
                    shadows = await shadows_in(milan, [twin])
                    return held.within("8") and {k.split("/")[1]: phase(s) for k, s in shadows.items()} == expected

                async def terminating(*names_: str) -> bool:
                    pods = {p["metadata"]["name"]: p for p in (await milan.list_all(PODS, namespace=twin))[0]}
                    return set(pods) == set(names_) and all(
                        p["metadata"].get("deletionTimestamp") for p in pods.values()
                    )

                await set_phase("Refused")
                stopping = {"big": ("Waiting", "NoAcceptedOffer"), "small": ("Waiting", "NoAcceptedOffer")}
                await eventually(lambda: shadows_say(stopping), timeout=30, message="both ShadowPods NoAcceptedOffer")
                await eventually(lambda: terminating("big", "small"), timeout=30, message="both pods terminating")

                # Accepted again while both pods still run: both keep their room, nothing is made.
                await set_phase("Accepted")
                holding = {"big": ("Created", None), "small": ("Created", None)}
                await eventually(lambda: shadows_say(holding), timeout=30, message="both ShadowPods hold their pods")
                assert await terminating("big", "small")

                # small's pod goes first: its next one, at 7 CPU, does not fit beside big's, still running.
                await hold_terminating(milan, twin, "small", held=False)
                small_waits = {"big": ("Created", None), "small": ("Waiting", "OverBudget")}
                await eventually(lambda: shadows_say(small_waits), timeout=60, message="small waits over budget")
                assert await terminating("big")

                # big's goes: big is made again; small still waits.
                await hold_terminating(milan, twin, "big", held=False)

                async def big_runs_again() -> bool:
                    pods = (await milan.list_all(PODS, namespace=twin))[0]
                    fresh = [p for p in pods if running(p) and not p["metadata"].get("deletionTimestamp")]
                    return [p["metadata"]["name"] for p in fresh] == ["big"] and len(pods) == 1

                await eventually(big_runs_again, timeout=60, message="big made again and running, alone")
                assert await shadows_say(small_waits)
                assert held.within("8")
            finally:
                for name in ("big", "small"):
                    await hold_terminating(milan, twin, name, held=False)
            for name in ("big", "small"):
                await peer.delete(SHADOW_PODS, name, namespace=twin)
            await eventually(lambda: _empty(milan, [twin]), timeout=90, message="the twin emptied")
