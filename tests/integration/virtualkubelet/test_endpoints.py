"""Endpoints across clusters: one Service, pods at home and on a provider, every endpoint listed on both sides.

rome (pod CIDR 10.244.0.0/16) offloads a namespace to milan (10.245.0.0/16) with LocalAndRemote, and a
Deployment spread over rome's node and milan's virtual node sits behind one Service. rome's EndpointSlice
controller lists all pods, the offloaded ones under the IPs milan gave them (home can dial them: the CIDRs
are apart); in the twin on milan, milan's controller lists the pods running there and our reflected slice
the pods running at home. naples uses rome's pod CIDR: its pods' addresses cannot be given to rome, nor
rome's to naples, and both are reported, never written wrong. With rome's own identity (rome's liqo
stopped), milan's API server refuses a slice listing anything but where milan sees rome's pods.
"""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import AsyncIterator

import pytest

from liqo.api import names
from liqo.api.components import MANAGER, VIRTUAL_KUBELET
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import DEPLOYMENTS, ENDPOINT_SLICES, EVENTS, NODES, PODS, SERVICES
from liqo.localclusters.realnodes.nodes import UNDERLAY_HOST
from liqo.peering import operations as peering
from liqo.virtualkubelet.forge import endpointslices as forge
from tests.integration.helpers import Offloaded, Site, deployment, offloaded_to, pod, running_pods, stopped, unique
from tests.shared import eventually

ROME_PODS = ipaddress.ip_network("10.244.0.0/16")
MILAN_PODS = ipaddress.ip_network("10.245.0.0/16")


def spread(name: str, namespace: str, *, replicas: int) -> Obj:
    """A Deployment whose pods spread evenly over rome's node and the virtual node."""
    made = deployment(name, namespace, replicas=replicas, cpu="10m")
    spec = made["spec"]["template"]["spec"]
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": name}},
        }
    ]
    return made


def service(name: str, namespace: str) -> Obj:
    meta = {"name": name, "namespace": namespace}
    spec = {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def reflected(endpoint_slice: Obj) -> bool:
    """Whether a slice is one a consumer reflected (not the provider's controller's)."""
    return bool((endpoint_slice["metadata"].get("labels") or {}).get(forge.MANAGED_BY_LABEL) == forge.MANAGED_BY)


def ready_addresses(slices: list[Obj], *, ours: bool | None = None) -> list[str]:
    """Every ready address of ``slices`` (``ours``: only the reflected ones, or only the others)."""
    found = []
    for endpoint_slice in slices:
        if ours is not None and reflected(endpoint_slice) != ours:
            continue
        for endpoint in endpoint_slice.get("endpoints") or []:
            if (endpoint.get("conditions") or {}).get("ready"):
                found.extend(endpoint["addresses"])
    return sorted(found)


async def slices_of(client: KubeClient, namespace: str, service_name: str) -> list[Obj]:
    selector = f"{forge.SERVICE_NAME_LABEL}={service_name}"
    return (await client.list_all(ENDPOINT_SLICES, namespace=namespace, label_selector=selector))[0]


async def pod_ips(client: KubeClient, namespace: str, app: str) -> list[str]:
    pods, _ = await client.list_all(PODS, namespace=namespace, label_selector=f"app={app}")
    return sorted(p["status"]["podIP"] for p in pods if (p.get("status") or {}).get("podIP"))


@pytest.fixture
async def split(sites: dict[str, Site]) -> AsyncIterator[tuple[str, str]]:
    """A namespace of rome offloaded to milan with LocalAndRemote: (home namespace, twin)."""
    async with offloaded_to(sites["rome"], sites["milan"], strategy="LocalAndRemote", prefix="split") as made:
        yield made.namespace, made.twin


async def test_a_split_deployment_lists_every_endpoint_on_both_sides(
    rome: KubeClient, milan: KubeClient, split: tuple[str, str]
) -> None:
    home, twin = split
    await rome.create(SERVICES, service("web", home))
    await rome.create(DEPLOYMENTS, spread("web", home, replicas=4))

    async def listed_everywhere(count: int) -> bool:
        at_home = ready_addresses(await slices_of(rome, home, "web"))
        remote = await slices_of(milan, twin, "web")
        return len(at_home) == count and len(ready_addresses(remote)) == count

    await eventually(lambda: listed_everywhere(4), timeout=90, message="4 ready endpoints at rome and on milan")
    at_home = ready_addresses(await slices_of(rome, home, "web"))
    milan_ips = await pod_ips(milan, twin, "web")
    assert len(milan_ips) == 2
    assert all(ipaddress.ip_address(ip) in MILAN_PODS for ip in milan_ips)
    # Home dials the offloaded pods at the IPs milan gave them; its own at its own.
    home_own = [ip for ip in at_home if ipaddress.ip_address(ip) in ROME_PODS]
    assert sorted(ip for ip in at_home if ip not in home_own) == milan_ips
    assert len(home_own) == 2
    # On milan: its controller lists its pods, our slice rome's; nothing twice.
    remote = await slices_of(milan, twin, "web")
    assert ready_addresses(remote, ours=False) == milan_ips
    assert ready_addresses(remote, ours=True) == sorted(home_own)
    assert all(names.ORIGIN in s["metadata"]["labels"] for s in remote if reflected(s))

    # Scaling follows on both sides; deleting the Service takes our slices away.
    await rome.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 6}}, namespace=home)
    await eventually(lambda: listed_everywhere(6), timeout=90, message="6 ready endpoints at rome and on milan")
    await rome.delete(SERVICES, "web", namespace=home)

    async def gone_from_milan() -> bool:
        return not await slices_of(milan, twin, "web")

    await eventually(gone_from_milan, timeout=60, message="the Service's slices gone from the twin")


async def test_a_provider_claiming_one_of_our_pods_addresses_gets_none_at_home(
    rome: KubeClient, milan: KubeClient, split: tuple[str, str]
) -> None:
    """Milan's admin (the provider: the peer, on its own cluster) rewrites its pod's status to the address of one
    of rome's own pods, as a pod it had sent back to rome would show. Rome finds no pod of milan's there, so the
    home pod gets no address: home's Service never sends traffic to a pod of rome's that the provider named."""
    home, twin = split
    await rome.create(SERVICES, service("web", home))
    await rome.create(DEPLOYMENTS, spread("web", home, replicas=2))
    (remote,) = await running_pods(milan, twin, 1)
    name = remote["metadata"]["name"]
    [victim] = [p for p in await running_pods(rome, home, 2) if p["metadata"]["name"] != name]
    victim_ip = victim["status"]["podIP"]
    assert ipaddress.ip_address(victim_ip) in ROME_PODS
    claim = {"status": {"podIP": victim_ip, "podIPs": [{"ip": victim_ip}]}}
    await milan.patch(PODS, name, claim, namespace=twin, subresource="status")

    async def refused() -> bool:
        events, _ = await rome.list_all(EVENTS, namespace=home, field_selector=f"involvedObject.name={name}")
        return any(
            e["reason"] == "PodIPNotReachable" and f"would be our pod {victim_ip}" in e["message"] for e in events
        )

    await eventually(refused, timeout=60, message=f"PodIPNotReachable naming {victim_ip} on {name}")
    assert (await rome.get(PODS, name, namespace=home)).get("status", {}).get("podIP") != victim_ip
    # Rome's own pod is listed once, for itself: never a second time for milan's.
    assert [ip for ip in ready_addresses(await slices_of(rome, home, "web")) if ip == victim_ip] == [victim_ip]


async def test_overlapping_pod_cidrs_are_reported_and_nothing_is_written_wrong(
    sites: dict[str, Site], rome: KubeClient, naples: KubeClient
) -> None:
    async with offloaded_to(sites["rome"], sites["naples"], strategy="LocalAndRemote", prefix="overlap") as made:
        namespace, twin = made.namespace, made.twin
        await rome.create(SERVICES, service("web", namespace))
        await rome.create(DEPLOYMENTS, spread("web", namespace, replicas=2))

        async def reported(reason: str, kind: str) -> bool:
            events, _ = await rome.list_all(EVENTS, namespace=namespace)
            return any(e["reason"] == reason and e["involvedObject"]["kind"] == kind for e in events)

        # The pod on naples runs, but home is not given an IP it would dial a pod of its own at.
        await eventually(
            lambda: reported("PodIPNotReachable", "Pod"), timeout=90, message="PodIPNotReachable on the home pod"
        )
        await eventually(
            lambda: reported("EndpointsNotReflected", "Service"), timeout=90, message="EndpointsNotReflected"
        )
        events, _ = await rome.list_all(EVENTS, namespace=namespace)
        messages = [e["message"] for e in events if e["reason"] in ("PodIPNotReachable", "EndpointsNotReflected")]
        assert all("overlaps" in m for m in messages), messages
        offloaded_pods = [
            p for p in (await rome.list_all(PODS, namespace=namespace))[0] if p["spec"].get("nodeName") == made.node
        ]
        assert offloaded_pods
        assert all(not (p.get("status") or {}).get("podIP") for p in offloaded_pods)
        at_home = ready_addresses(await slices_of(rome, namespace, "web"))
        assert all(ipaddress.ip_address(ip) in ROME_PODS for ip in at_home)
        assert len(at_home) == 1  # rome's own pod only
        # On naples, no slice of ours: rome's pod address would mean one of naples' own pods.
        assert ready_addresses(await slices_of(naples, twin, "web"), ours=True) == []


async def test_a_partition_marks_endpoints_not_ready_and_they_recover(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, split: tuple[str, str]
) -> None:
    home, twin = split
    await rome.create(SERVICES, service("web", home))
    await rome.create(DEPLOYMENTS, spread("web", home, replicas=2))

    async def ready_at_home(count: int) -> bool:
        return len(ready_addresses(await slices_of(rome, home, "web"))) == count

    async def ours_ready_on_milan(count: int) -> bool:
        slices = await slices_of(milan, twin, "web")
        listed = [
            e
            for s in slices
            if (s["metadata"].get("labels") or {}).get(forge.MANAGED_BY_LABEL) == forge.MANAGED_BY
            for e in s.get("endpoints") or []
        ]
        return len(listed) == 1 and len(ready_addresses(slices, ours=True)) == count

    await eventually(lambda: ready_at_home(2), timeout=90, message="2 ready endpoints at rome")
    await eventually(lambda: ours_ready_on_milan(1), timeout=60, message="rome's endpoint ready on milan")

    # milan's API server down: rome cannot see its pod, which turns not-ready at home (not gone), then back.
    async with stopped(sites["milan"], "kube-apiserver"):
        await eventually(lambda: ready_at_home(1), timeout=60, message="milan's endpoint not ready at rome")
        endpoints = [e for s in await slices_of(rome, home, "web") for e in s.get("endpoints") or []]
        assert len(endpoints) == 2  # still listed
    await eventually(lambda: ready_at_home(2), timeout=120, message="milan's endpoint ready again at rome")

    # rome's virtual kubelet silent: milan stops trusting rome's endpoint after 40 s (not gone), then back.
    async with stopped(sites["rome"], VIRTUAL_KUBELET):
        await eventually(lambda: ours_ready_on_milan(0), timeout=90, message="rome's endpoint not ready on milan")
    await eventually(lambda: ours_ready_on_milan(1), timeout=90, message="rome's endpoint ready again on milan")
    # Nothing doubled by the restarts: the same two endpoints, ready at rome, rome's alone reflected to milan.
    await eventually(lambda: ready_at_home(2), timeout=90, message="both endpoints ready at rome after the restart")
    endpoints = [e for s in await slices_of(rome, home, "web") for e in s.get("endpoints") or []]
    assert len(endpoints) == 2


def endpoint_slice(name: str, namespace: str, service_name: str, *addresses: str, address_type: str = "IPv4") -> Obj:
    """A slice of Service ``service_name`` listing ``addresses``, as a consumer writes one."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": namespace, "labels": {forge.SERVICE_NAME_LABEL: service_name}},
        "addressType": address_type,
        "endpoints": [{"addresses": [address], "conditions": {"ready": True}} for address in addresses],
        "ports": [{"name": "http", "port": 443, "protocol": "TCP"}],
    }


async def api_server_address(milan: KubeClient) -> str:
    """Where milan's pods reach its API server: the ``kubernetes`` Service's address.

    (Its slice lists no endpoint on a local cluster, whose API server listens on loopback.)
    """
    return str((await milan.get(SERVICES, "kubernetes", namespace="default"))["spec"]["clusterIP"])


async def node_address(milan: KubeClient) -> str:
    """A node's InternalIP (its kubelet); where nodes sit on loopback (KWOK), the underlay host's address.

    Kubernetes itself refuses a loopback endpoint; the underlay host is where a local cluster's real nodes
    reach their API server (docs/security.md, "Local clusters' real nodes").
    """
    nodes, _ = await milan.list_all(NODES, label_selector="!" + names.VIRTUAL_NODE_TYPE)
    address = next(str(a["address"]) for a in nodes[0]["status"]["addresses"] if a["type"] == "InternalIP")
    return UNDERLAY_HOST if ipaddress.ip_address(address).is_loopback else address


@contextlib.asynccontextmanager
async def milan_pod_address(milan: KubeClient, namespace: str) -> AsyncIterator[str]:
    """The IP of a pod of milan's own (in a namespace of milan's, not a twin), for the duration."""
    name = unique("own")
    await milan.create(PODS, pod(name, namespace))
    found: list[str] = []

    async def has_ip() -> bool:
        ip = ((await milan.get(PODS, name, namespace=namespace)).get("status") or {}).get("podIP")
        found.extend([ip] if ip else [])
        return bool(ip)

    try:
        await eventually(has_ip, timeout=60, message=f"an IP for milan's pod {name}")
        yield found[0]
    finally:
        await milan.delete(PODS, name, namespace=namespace, grace_period_seconds=0)


async def test_the_provider_refuses_endpoints_outside_the_peers_pods_from_the_peer_itself(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """A selector-less Service in the twin, and a slice aiming it at milan's internals: refused, nothing stored.

    Whatever reaches that Service on milan (its pods, an Ingress) would be forwarded to milan's own: its API
    server, a pod of its own, a node (its kubelet), or whatever a name resolves to there.
    """
    twin = offloaded.twin
    identity = await peering.peer_kubeconfig(rome, sites["milan"].cluster_id)
    service_name, name = unique("inside"), unique("hostile")
    inside = str(ROME_PODS.network_address + 7)  # where milan sees rome's pods: rome's pod CIDR (they are apart)
    async with (
        milan_pod_address(milan, "default") as milan_pod,
        stopped(sites["rome"], MANAGER, VIRTUAL_KUBELET),
        KubeClient.from_kubeconfig_dict(identity, name="rome@milan") as as_rome,
    ):
        targets = [
            ("the API server", await api_server_address(milan), "IPv4", "endpoints"),
            ("a pod of milan", milan_pod, "IPv4", "endpoints"),
            ("a node of milan", await node_address(milan), "IPv4", "endpoints"),
            ("a name", "kubernetes.default.svc.cluster.local", "FQDN", "addressType"),
        ]
        selectorless = service(service_name, twin)
        del selectorless["spec"]["selector"]
        await as_rome.create(SERVICES, selectorless)
        for target, address, address_type, field in targets:
            with pytest.raises(ApiError) as refused:
                await as_rome.create(
                    ENDPOINT_SLICES, endpoint_slice(name, twin, service_name, address, address_type=address_type)
                )
            assert refused.value.status == 403, (target, refused.value)
            assert field in refused.value.message, (target, refused.value.message)
            with pytest.raises(NotFoundError):
                await milan.get(ENDPOINT_SLICES, name, namespace=twin)

        # The same identity may list where milan sees rome's pods, and may not move such a slice outside.
        await as_rome.create(ENDPOINT_SLICES, endpoint_slice(name, twin, service_name, inside))
        for target, address, _type, _field in targets[:3]:
            current = await milan.get(ENDPOINT_SLICES, name, namespace=twin)
            moved = endpoint_slice(name, twin, service_name, inside, address)
            moved["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            with pytest.raises(ApiError) as refused:
                await as_rome.replace(ENDPOINT_SLICES, moved)
            assert refused.value.status == 403, (target, refused.value)
        listed = (await milan.get(ENDPOINT_SLICES, name, namespace=twin))["endpoints"]
        assert [e["addresses"] for e in listed] == [[inside]]
        await as_rome.delete(ENDPOINT_SLICES, name, namespace=twin)
        await as_rome.delete(SERVICES, service_name, namespace=twin)
