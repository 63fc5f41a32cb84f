"""Services and Ingresses of an offloaded namespace, copied into the twin on the provider and kept in step.

rome offloads a namespace to milan (the ``offloaded`` fixture); rome's virtual kubelet copies each Service
(ports, selector, session affinity, headless-ness; never rome's cluster IPs, node ports or load balancer)
and each Ingress (its class cleared) into the twin, follows updates and deletions, and leaves a namesake
milan made alone. With rome's own identity, and rome's virtual kubelet stopped, milan's API server refuses
Services that would open its nodes or capture its traffic.
"""

from __future__ import annotations

from typing import Any

import pytest

from liqo.api import names
from liqo.install.manifests import VIRTUAL_KUBELET
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.resources import EVENTS, INGRESSES, SERVICES, Resource
from liqo.peering import operations as peering
from tests.helpers import Obj, Offloaded, Site, eventually, stopped, unique


def service(name: str, namespace: str, **spec: Any) -> Obj:
    body = {"selector": {"app": name}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]} | spec
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace}, "spec": body}


def ingress(name: str, namespace: str, backend: str, **spec: Any) -> Obj:
    rule = {
        "host": f"{name}.example.com",
        "http": {
            "paths": [
                {
                    "path": "/",
                    "pathType": "Prefix",
                    "backend": {"service": {"name": backend, "port": {"number": 80}}},
                }
            ]
        },
    }
    meta = {"name": name, "namespace": namespace}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": meta,
        "spec": {"rules": [rule], **spec},
    }


async def get(client: KubeClient, resource: Resource, name: str, namespace: str) -> Obj | None:
    try:
        return await client.get(resource, name, namespace=namespace)
    except NotFoundError:
        return None


async def until(client: KubeClient, resource: Resource, name: str, namespace: str, check: Any) -> Obj:
    """Wait until ``check(obj)`` holds for ``namespace/name`` on ``client`` (None: until it is gone)."""
    found: Obj = {}

    async def holds() -> bool:
        obj = await get(client, resource, name, namespace)
        if check is None:
            return obj is None
        if obj is None or not check(obj):
            return False
        found.update(obj)
        return True

    await eventually(holds, timeout=30, message=f"{resource.kind} {namespace}/{name} on {client.name}")
    return found


async def test_services_are_copied_without_home_addresses_and_follow_home(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    home, twin = offloaded.namespace, offloaded.twin
    rome_id = sites["rome"].cluster_id
    await rome.create(SERVICES, service("web", home, sessionAffinity="ClientIP"))
    await rome.create(SERVICES, service("db", home, clusterIP="None"))
    await rome.create(SERVICES, service("edge", home, type="NodePort"))
    await rome.create(SERVICES, service("balanced", home, type="LoadBalancer", externalIPs=["192.0.2.10"]))
    home_web = await rome.get(SERVICES, "web", namespace=home)

    web = await until(milan, SERVICES, "web", twin, lambda s: True)
    assert web["metadata"]["labels"][names.ORIGIN] == rome_id
    assert web["spec"]["selector"] == {"app": "web"}
    assert web["spec"]["sessionAffinity"] == "ClientIP"
    assert [(p["port"], p["targetPort"]) for p in web["spec"]["ports"]] == [(80, 8080)]
    assert web["spec"]["clusterIP"] != home_web["spec"]["clusterIP"] or not web["spec"]["clusterIP"].startswith(
        home_web["spec"]["clusterIP"]
    )
    db = await until(milan, SERVICES, "db", twin, lambda s: True)
    assert db["spec"]["clusterIP"] == "None"  # headless stays headless
    edge = await until(milan, SERVICES, "edge", twin, lambda s: True)
    home_edge = await rome.get(SERVICES, "edge", namespace=home)
    assert home_edge["spec"]["ports"][0]["nodePort"]
    assert edge["spec"]["type"] == "ClusterIP"
    assert "nodePort" not in edge["spec"]["ports"][0]
    balanced = await until(milan, SERVICES, "balanced", twin, lambda s: True)
    assert balanced["spec"]["type"] == "ClusterIP"
    assert not balanced["spec"].get("externalIPs")

    # An update flows (the provider keeps its own cluster IP); a deletion too.
    await rome.patch(
        SERVICES, "web", {"spec": {"ports": [{"name": "http", "port": 81, "targetPort": 8080}]}}, namespace=home
    )
    moved = await until(milan, SERVICES, "web", twin, lambda s: s["spec"]["ports"][0]["port"] == 81)
    assert moved["spec"]["clusterIP"] == web["spec"]["clusterIP"]
    assert moved["metadata"]["uid"] == web["metadata"]["uid"]
    await rome.delete(SERVICES, "edge", namespace=home)
    await until(milan, SERVICES, "edge", twin, None)

    # Opted out: the copy goes.
    await rome.patch(SERVICES, "db", {"metadata": {"annotations": {names.SKIP_REFLECTION: "true"}}}, namespace=home)
    await until(milan, SERVICES, "db", twin, None)


async def test_a_service_namesake_on_the_provider_is_left_alone_with_an_event(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    home, twin = offloaded.namespace, offloaded.twin
    name = unique("shared")
    await milan.create(SERVICES, service(name, twin, selector={"owner": "milan"}))
    await rome.create(SERVICES, service(name, home))

    async def warned() -> bool:
        events, _ = await rome.list_all(EVENTS, namespace=home)
        return any(e["reason"] == "ReflectionConflict" and e["involvedObject"]["name"] == name for e in events)

    await eventually(warned, timeout=30, message="a ReflectionConflict Event on rome's Service")
    theirs = await milan.get(SERVICES, name, namespace=twin)
    assert theirs["spec"]["selector"] == {"owner": "milan"}
    assert names.ORIGIN not in (theirs["metadata"].get("labels") or {})
    await rome.delete(SERVICES, name, namespace=home)
    marker = unique("marker")
    await rome.create(SERVICES, service(marker, home))
    await until(milan, SERVICES, marker, twin, lambda s: True)  # later than the deletion: it was seen
    assert await get(milan, SERVICES, name, twin) is not None


async def test_ingresses_are_copied_with_their_class_cleared(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    home, twin = offloaded.namespace, offloaded.twin
    await rome.create(SERVICES, service("site", home))
    annotations = {"kubernetes.io/ingress.class": "home-nginx", "team": "web"}
    made = ingress("site", home, "site", ingressClassName="home-nginx")
    made["metadata"]["annotations"] = annotations
    await rome.create(INGRESSES, made)
    copy = await until(milan, INGRESSES, "site", twin, lambda i: True)
    assert "ingressClassName" not in copy["spec"]
    assert copy["metadata"]["annotations"] == {"team": "web"}
    assert copy["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == "site"

    changed = ingress("other", home, "site")["spec"]["rules"]
    await rome.patch(INGRESSES, "site", {"spec": {"rules": changed}}, namespace=home)
    await until(milan, INGRESSES, "site", twin, lambda i: i["spec"]["rules"][0]["host"] == "other.example.com")
    await rome.delete(INGRESSES, "site", namespace=home)
    await until(milan, INGRESSES, "site", twin, None)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"type": "NodePort"}, "spec.type"),
        ({"type": "LoadBalancer"}, "spec.type"),
        ({"externalIPs": ["192.0.2.10"]}, "spec.externalIPs"),
        ({"loadBalancerIP": "192.0.2.20"}, "spec.loadBalancer"),
    ],
)
async def test_the_provider_refuses_services_that_open_its_nodes_from_the_peer_itself(
    *, sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded, spec: Obj, field: str
) -> None:
    identity = await peering.peer_kubeconfig(rome, sites["milan"].cluster_id)
    name = unique("hostile")
    async with (
        stopped(sites["rome"], VIRTUAL_KUBELET),
        KubeClient.from_kubeconfig_dict(identity, name="rome@milan") as as_rome,
    ):
        with pytest.raises(ApiError) as refused:
            await as_rome.create(SERVICES, service(name, offloaded.twin, **spec))
        assert refused.value.status in (400, 403, 422)
        assert field in refused.value.message
        assert await get(milan, SERVICES, name, offloaded.twin) is None
        # The same identity may still write a plain ClusterIP Service there (what the copies are).
        await as_rome.create(SERVICES, service(name, offloaded.twin))
        await as_rome.delete(SERVICES, name, namespace=offloaded.twin)
