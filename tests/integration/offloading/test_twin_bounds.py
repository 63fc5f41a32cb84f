"""A consumer's twins and tenant namespace are bounded, and its writes there follow its offer.

docs/security.md, "Twins' bounds". rome consumes from milan; the attacks use rome's own identity on milan (the
kubeconfig milan issued it), with rome's manager and virtual kubelet stopped where what they write would hide
or undo what the peer does. Only milan's defences stand: its quotas, its RBAC, its admission policies.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import pytest

from liqo.api import names
from liqo.api.bounds import DEFAULT_TENANT_QUOTA, DEFAULT_TWIN_QUOTA, object_quota, quota_matches
from liqo.api.components import MANAGER, VIRTUAL_KUBELET
from liqo.api.networks import ClusterNetwork, PodNetwork, pods_seen_at, recorded_network, remapped_pod_cidr
from liqo.api.resources import NAMESPACE_MAPS, NETWORK_CONFIGS, RESOURCE_OFFERS, SHADOW_PODS
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import (
    CONFIGMAPS,
    LEASES,
    NAMESPACES,
    NETWORK_POLICIES,
    PODS,
    RESOURCE_QUOTAS,
    ROLE_BINDINGS,
    SECRETS,
    SERVICES,
    Resource,
)
from liqo.offloading import operations as offloading
from liqo.offloading.twins import PEER_REFUSED_SECRET_TYPES, twin_network_policy
from liqo.peering import operations
from tests.integration.helpers import (
    Offloaded,
    Site,
    drop_offloaded,
    made_once_allowed,
    namespace_map,
    offload_fresh,
    peer_identity,
    shadow_pod,
    sharing_policy,
    stopped,
    unique,
)
from tests.shared import eventually

ROME_COMPONENTS = [MANAGER, VIRTUAL_KUBELET]
LEASE_COUNT = "count/leases.coordination.k8s.io"
SERVICE_COUNT = "count/services"


def service(name: str, namespace: str) -> Obj:
    spec = {"selector": {"app": name}, "ports": [{"port": 80}]}
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def lease(name: str, namespace: str) -> Obj:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": namespace}}


async def fill(peer: KubeClient, resource: Resource, make: Any, *, namespace: str, most: int) -> ApiError:
    """Create ``make(name, namespace)`` objects as ``peer`` until refused (at most ``most`` tries); the refusal."""
    for _ in range(most):
        try:
            await peer.create(resource, make(unique("fill"), namespace))
        except ApiError as exc:
            return exc
    raise AssertionError(f"{most} {resource.plural} created in {namespace}: nothing bounds them")


async def count(milan: KubeClient, resource: Resource, namespace: str) -> int:
    return len((await milan.list_all(resource, namespace=namespace))[0])


async def refused(call: Callable[[], Awaitable[Any]]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await call()
    return caught.value


# -- 1. object counts -------------------------------------------------------------------------------------------


async def test_a_peer_fills_its_twin_and_its_tenant_namespace_only_up_to_their_quotas(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    twin, tenant = offloaded.twin, names.tenant_namespace(rome_id)
    for namespace, hard in ((twin, DEFAULT_TWIN_QUOTA), (tenant, DEFAULT_TENANT_QUOTA)):
        quota = await milan.get(RESOURCE_QUOTAS, names.PEER_QUOTA, namespace=namespace)
        assert quota_matches(quota, object_quota(namespace=namespace, peer_id=rome_id, hard=hard)), quota["spec"]
    try:
        async with peer_identity(rome, milan_id, name="rome@milan") as peer, stopped(sites["rome"], *ROME_COMPONENTS):
            # Its request, map and NetworkConfig are its own, one each, by name.
            other: Obj = {
                "apiVersion": NAMESPACE_MAPS.api_version,
                "kind": NAMESPACE_MAPS.kind,
                "metadata": {"name": unique("map"), "namespace": tenant},
                "spec": {"consumerClusterID": rome_id, "mappings": {}},
            }
            error = await refused(partial(peer.create, NAMESPACE_MAPS, other))
            assert error.status == 403, error
            assert "a peer writes only its own NamespaceMap, named after its cluster ID" in error.message, error
            # Leases: the one create in its tenant namespace RBAC cannot name (its heartbeat's).
            error = await fill(peer, LEASES, lease, namespace=tenant, most=DEFAULT_TENANT_QUOTA[LEASE_COUNT] + 1)
            assert error.status == 403, error
            assert f"exceeded quota: {names.PEER_QUOTA}" in error.message, error
            assert LEASE_COUNT in error.message, error
            assert await count(milan, LEASES, tenant) == DEFAULT_TENANT_QUOTA[LEASE_COUNT]
            error = await fill(peer, SERVICES, service, namespace=twin, most=DEFAULT_TWIN_QUOTA[SERVICE_COUNT] + 1)
            assert error.status == 403, error
            assert f"exceeded quota: {names.PEER_QUOTA}" in error.message, error
            assert SERVICE_COUNT in error.message, error
            assert await count(milan, SERVICES, twin) == DEFAULT_TWIN_QUOTA[SERVICE_COUNT]

            # The bound is not the peer's to lift, nor to add to.
            for namespace in (twin, tenant):
                raised = {"spec": {"hard": {SERVICE_COUNT: "100000"}}}
                for call in (
                    partial(peer.patch, RESOURCE_QUOTAS, names.PEER_QUOTA, raised, namespace=namespace),
                    partial(peer.delete, RESOURCE_QUOTAS, names.PEER_QUOTA, namespace=namespace),
                    partial(peer.create, RESOURCE_QUOTAS, object_quota(namespace=namespace, peer_id=rome_id, hard={})),
                ):
                    assert (await refused(call)).status == 403
            assert quota_matches(
                await milan.get(RESOURCE_QUOTAS, names.PEER_QUOTA, namespace=twin),
                object_quota(namespace=twin, peer_id=rome_id, hard=DEFAULT_TWIN_QUOTA),
            )
    finally:
        for resource, namespace in ((LEASES, tenant), (SERVICES, twin)):
            for item in (await milan.list_all(resource, namespace=namespace))[0]:
                if item["metadata"]["name"].startswith("fill"):
                    await milan.delete(resource, item["metadata"]["name"], namespace=namespace)


# -- 2. the twin's NetworkPolicy --------------------------------------------------------------------------------


async def expected_network_policy(milan: KubeClient, sites: dict[str, Site], twin: str, allowed: PodNetwork) -> Obj:
    """What milan's twin of rome's namespace must hold, by the pure function, from milan's own records.

    rome's pods where milan sees them: from the network milan's ForeignCluster records for rome and milan's
    NetworkConfig for it (none here: no network fabric on these clusters, rome's pod CIDR is clear of milan's);
    the same block the twin's ``liqo.io/peer-pods`` tells the admission policies.
    """
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    settings = (await milan.get(CONFIGMAPS, names.CLUSTER_SETTINGS, namespace=names.LIQO_NAMESPACE))["data"]
    local = ClusterNetwork.parse(pod_cidr=settings["podCIDR"], service_cidr=settings["serviceCIDR"])
    try:
        ours = await milan.get(NETWORK_CONFIGS, milan_id, namespace=names.tenant_namespace(rome_id))
    except NotFoundError:
        ours = None
    recorded = await operations.foreign_cluster(milan, rome_id)
    assert recorded is not None
    home_pods = pods_seen_at(owner=recorded_network(recorded), reader=local, remapped_pod_cidr=remapped_pod_cidr(ours))
    assert home_pods is not None
    annotations = (await milan.get(NAMESPACES, twin))["metadata"].get("annotations") or {}
    assert annotations.get(names.PEER_PODS) == str(home_pods), annotations
    return twin_network_policy(namespace=twin, consumer_id=rome_id, home_pods=home_pods, local=local, allowed=allowed)


async def test_every_twin_holds_a_network_policy_that_follows_the_providers_policy_and_the_peer_cannot_touch(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    twin = offloaded.twin
    made = await milan.get(NETWORK_POLICIES, names.PEER_NETWORK_POLICY, namespace=twin)
    assert made["spec"] == (await expected_network_policy(milan, sites, twin, PodNetwork()))["spec"]
    assert made["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert made["spec"]["podSelector"] == {}

    # The provider opens the internet (and its ingress controller's namespace) to rome's pods: the twin follows,
    # with the metadata endpoint, milan's pods and Services left out of the block.
    opened = {"egress": [{"cidr": "0.0.0.0/0"}], "ingress": [{"namespace": "ingress-nginx"}]}
    async with sharing_policy(milan, rome_id, prefix="bounds", podNetwork=opened):
        wanted = (await expected_network_policy(milan, sites, twin, PodNetwork.from_spec(opened)))["spec"]

        async def followed() -> bool:
            current = await milan.get(NETWORK_POLICIES, names.PEER_NETWORK_POLICY, namespace=twin)
            return bool(current["spec"] == wanted)

        await eventually(followed, timeout=30, message="the twin's NetworkPolicy opening what milan's policy opens")
        # Beside the opened block, rome's home pods where milan sees them (the twin's annotation says where).
        home = (await milan.get(NAMESPACES, twin))["metadata"]["annotations"][names.PEER_PODS]
        blocks = {peer["ipBlock"]["cidr"]: peer["ipBlock"] for peer in wanted["egress"][0]["to"] if "ipBlock" in peer}
        assert set(blocks) == {"0.0.0.0/0", home}, blocks
        block = blocks["0.0.0.0/0"]
        assert {"169.254.0.0/16", "10.245.0.0/16"} <= set(block["except"]), block

    async def restored() -> bool:
        current = await milan.get(NETWORK_POLICIES, names.PEER_NETWORK_POLICY, namespace=twin)
        return bool(current["spec"] == made["spec"])

    # The policy gone, the twin's NetworkPolicy closes again (asynchronously): then the peer tries its hand, and
    # what it leaves is checked at once.
    await eventually(restored, timeout=30, message="the twin's NetworkPolicy back to milan's default")
    async with peer_identity(rome, milan_id, name="rome@milan") as peer:
        own = dict(made, metadata={"name": unique("mine"), "namespace": twin})
        for call in (
            partial(peer.delete, NETWORK_POLICIES, names.PEER_NETWORK_POLICY, namespace=twin),
            partial(
                peer.patch, NETWORK_POLICIES, names.PEER_NETWORK_POLICY, {"spec": {"policyTypes": []}}, namespace=twin
            ),
            partial(peer.create, NETWORK_POLICIES, own),
        ):
            assert (await refused(call)).status == 403
    assert (await milan.get(NETWORK_POLICIES, names.PEER_NETWORK_POLICY, namespace=twin))["spec"] == made["spec"]


# -- 3. Secrets this cluster's controllers act on ---------------------------------------------------------------


async def test_a_peer_cannot_have_milan_mint_a_service_account_token_in_its_twin(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    twin = offloaded.twin
    async with (
        peer_identity(rome, sites["milan"].cluster_id, name="rome@milan") as peer,
        stopped(sites["rome"], *ROME_COMPONENTS),
    ):
        for kind in PEER_REFUSED_SECRET_TYPES:
            name = unique("minted")
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": name,
                    "namespace": twin,
                    "annotations": {"kubernetes.io/service-account.name": "default"},
                },
                "type": kind,
            }
            error = await refused(partial(peer.create, SECRETS, body))
            assert error.status == 403, (kind, error)
            assert f"a peer may not write Secrets of type {PEER_REFUSED_SECRET_TYPES[0]}" in error.message, error
            with pytest.raises(NotFoundError):
                await milan.get(SECRETS, name, namespace=twin)
        # What the consumer's own pods and Ingresses read passes: the virtual kubelet copies these.
        for kind, data in (
            ("Opaque", {"k": "dg=="}),
            ("kubernetes.io/tls", {"tls.crt": "", "tls.key": ""}),
            ("kubernetes.io/dockerconfigjson", {".dockerconfigjson": "e30="}),
        ):
            name = unique("data")
            body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": twin}, "type": kind}
            await peer.create(SECRETS, body | {"data": data})
            await peer.delete(SECRETS, name, namespace=twin)


# -- 4. a Deny stops reflection too -----------------------------------------------------------------------------


async def test_after_a_deny_the_peer_writes_nothing_in_its_twin_until_shared_again(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """A cooperative consumer drops its map when its virtual node goes; a hostile one keeps it, and its twin."""
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    twin, tenant = offloaded.twin, names.tenant_namespace(rome_id)

    async def offer() -> Obj | None:
        try:
            return await milan.get(RESOURCE_OFFERS, milan_id, namespace=tenant)
        except NotFoundError:
            return None

    async with peer_identity(rome, milan_id, name="rome@milan") as peer, stopped(sites["rome"], *ROME_COMPONENTS):
        await peer.create(SERVICES, service("before", twin))
        async with sharing_policy(milan, rome_id, prefix="bounds", action="Deny"):

            async def offer_gone() -> bool:
                return await offer() is None

            async def withdrawn() -> bool:
                found = await milan.get(NAMESPACE_MAPS, rome_id, namespace=tenant)
                entry = ((found.get("status") or {}).get("mappings") or {}).get(offloaded.namespace) or {}
                return "its writes in its twins are withdrawn" in entry.get("message", "")

            await eventually(offer_gone, timeout=60, message="milan's offer to rome withdrawn by the Deny")
            # Milan's word that it processed the Deny in this twin: the consumer's map says so.
            await eventually(withdrawn, timeout=30, message="milan reporting rome's writes withdrawn")
            late = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late", "namespace": twin}}
            for call in (
                partial(peer.create, SERVICES, service("after", twin)),
                partial(peer.patch, SERVICES, "before", {"spec": {"selector": {"app": "elsewhere"}}}, namespace=twin),
                partial(peer.create, CONFIGMAPS, late),
            ):
                error = await refused(call)
                assert error.status == 403, error
            assert (await milan.get(SERVICES, "before", namespace=twin))["spec"]["selector"] == {"app": "before"}
            with pytest.raises(NotFoundError):
                await milan.get(SERVICES, "after", namespace=twin)
            # What it wrote, it may still withdraw.
            await peer.delete(SERVICES, "before", namespace=twin)

        async def offered_again() -> bool:
            return await offer() is not None

        # Shared again: milan offers, and accepting (the consumer's one right on the offer) gives its writes back.
        await eventually(offered_again, timeout=60, message="milan offering to rome again")
        accepted = {"status": {"phase": "Accepted"}}
        await peer.patch(RESOURCE_OFFERS, milan_id, accepted, namespace=tenant, subresource="status")

        await made_once_allowed(
            lambda: peer.create(SERVICES, service("after", twin)),
            refused_with=403,
            timeout=30,
            message="rome writing in its twin once it accepted milan's offer",
        )
        binding = await milan.get(ROLE_BINDINGS, names.PEER_WRITER_BINDING, namespace=twin)
        assert binding["roleRef"]["name"] == names.PEER_TWIN_WRITER_ROLE
        await peer.delete(SERVICES, "after", namespace=twin)


# -- 5. a dropped twin ------------------------------------------------------------------------------------------


async def test_a_dropped_twin_takes_its_own_shadow_pods_and_nothing_else(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """Milan deletes a dropped twin (its UID a precondition), then the ShadowPods listed in it, each by name and UID.

    The peer names its ShadowPods and drops the twin itself: a namesake in its other twin stays, with its pod.
    """
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    tenant = names.tenant_namespace(rome_id)
    other = await offload_fresh(rome, rome_id)
    try:
        async with peer_identity(rome, milan_id, name="rome@milan") as peer, stopped(sites["rome"], *ROME_COMPONENTS):
            for twin in (offloaded.twin, other.twin):
                await peer.create(SHADOW_PODS, shadow_pod("namesake", twin, rome_id, cpu="10m"))
            await peer.create(SHADOW_PODS, shadow_pod("only-here", offloaded.twin, rome_id, cpu="10m"))

            async def pods_made() -> bool:
                made = [(await count(milan, PODS, twin)) for twin in (offloaded.twin, other.twin)]
                return made == [2, 1]

            await eventually(pods_made, timeout=60, message="milan made the three ShadowPods' pods")
            kept = await milan.get(SHADOW_PODS, "namesake", namespace=other.twin)
            mappings = (await milan.get(NAMESPACE_MAPS, rome_id, namespace=tenant))["spec"]["mappings"]
            assert set(mappings) == {offloaded.namespace, other.namespace}
            del mappings[offloaded.namespace]
            await peer.apply(NAMESPACE_MAPS, namespace_map(rome_id, mappings))

            async def dropped() -> bool:
                try:
                    await milan.get(NAMESPACES, offloaded.twin)
                except NotFoundError:
                    return True
                return False

            await eventually(dropped, timeout=60, message=f"the dropped twin {offloaded.twin} gone, its pods with it")
            now = await milan.get(SHADOW_PODS, "namesake", namespace=other.twin)
            assert now["metadata"]["uid"] == kept["metadata"]["uid"]
            assert "deletionTimestamp" not in now["metadata"]
            assert [
                p["metadata"].get("deletionTimestamp") for p in (await milan.list_all(PODS, namespace=other.twin))[0]
            ] == [None]
            await peer.delete(SHADOW_PODS, "namesake", namespace=other.twin)
        # rome's manager, back, asks for the twin again: the fixture's unoffload then finds it as it left it.
        await offloading.wait_offloaded(rome, offloaded.namespace, timeout=60)
    finally:
        await drop_offloaded(rome, other.namespace)
