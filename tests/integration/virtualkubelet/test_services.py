"""Services and Ingresses of an offloaded namespace, copied into the twin on the provider and kept in step.

rome offloads a namespace to milan (the ``offloaded`` fixture); rome's virtual kubelet copies each Service
(ports, selector, session affinity, headless-ness; never rome's cluster IPs, node ports or load balancer,
nor an ExternalName) and each Ingress (on its class, which milan's policy must offer rome) into the twin,
follows updates and deletions, and leaves a namesake milan made alone. With rome's own identity, and rome's
liqo stopped, milan's API server refuses Services that would open its nodes, capture its traffic or alias a
name, and Ingresses outside what milan's policy offers rome: another class, a default backend, hosts not
given to rome, annotations its ingress controller would act on.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from liqo.api import names
from liqo.api.components import MANAGER, VIRTUAL_KUBELET
from liqo.api.resources import SHARING_POLICIES
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import EVENTS, INGRESSES, SERVICES, Resource
from liqo.peering import operations as peering
from tests.integration.helpers import Offloaded, Site, stopped, unique
from tests.shared import apply_patch, eventually


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
    # An ExternalName is a DNS alias inside the provider: not copied (milan would refuse it), said at home.
    await rome.create(SERVICES, service("alias", home, type="ExternalName", externalName="db.example.com"))
    assert "ExternalName" in await warned(rome, home, "alias", "NotReflected")
    assert await get(milan, SERVICES, "alias", twin) is None

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


@contextlib.asynccontextmanager
async def ingress_policy(milan: KubeClient, rome_id: str, **ingress: list[str]) -> AsyncIterator[None]:
    """A SharingPolicy of milan's naming rome and offering its Ingresses ``ingress``, for the duration."""
    name = unique("ingress-rome")
    policy: Obj = {
        "apiVersion": SHARING_POLICIES.api_version,
        "kind": SHARING_POLICIES.kind,
        "metadata": {"name": name},
        "spec": {"action": "Share", "peers": [rome_id], "ingress": ingress},
    }
    await milan.create(SHARING_POLICIES, policy)
    try:
        yield
    finally:
        await milan.delete(SHARING_POLICIES, name)


def offered(name: str, namespace: str, backend: str) -> Obj:
    """An Ingress within what :data:`OFFER` lets rome publish on milan."""
    made = ingress(name, namespace, backend, ingressClassName="public")
    host = f"{name}.rome.example.com"
    made["spec"]["rules"][0]["host"] = host
    made["spec"]["tls"] = [{"hosts": [host], "secretName": f"{name}-tls"}]
    made["metadata"]["annotations"] = {"cert-manager.io/cluster-issuer": "letsencrypt"}
    return made


OFFER = {"classes": ["public"], "hosts": ["*.rome.example.com"], "annotations": ["cert-manager.io/cluster-issuer"]}
"""What milan's policy offers rome's Ingresses in these tests."""


async def test_ingresses_are_copied_on_a_class_the_provider_offers(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    home, twin = offloaded.namespace, offloaded.twin
    await rome.create(SERVICES, service("site", home))
    async with ingress_policy(milan, sites["rome"].cluster_id, **OFFER):
        made = offered("site", home, "site")
        made["metadata"]["annotations"]["kubernetes.io/ingress.class"] = "public"  # never copied
        await rome.create(INGRESSES, made)
        copy = await until(milan, INGRESSES, "site", twin, lambda i: True)
        assert copy["spec"]["ingressClassName"] == "public"  # no --ingress-class mapping: the home class as it is
        assert copy["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
        assert copy["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == "site"

        changed = offered("other", home, "site")["spec"]["rules"]
        await rome.patch(INGRESSES, "site", {"spec": {"rules": changed}}, namespace=home)
        await until(milan, INGRESSES, "site", twin, lambda i: i["spec"]["rules"][0]["host"] == "other.rome.example.com")

        # What milan refuses is said at home, with milan's reason, and nothing is copied.
        snippet = offered("snippet", home, "site")
        snippet["metadata"]["annotations"]["nginx.ingress.kubernetes.io/server-snippet"] = "location / {}"
        await rome.create(INGRESSES, snippet)
        classless = offered("classless", home, "site")
        del classless["spec"]["ingressClassName"]
        await rome.create(INGRESSES, classless)
        refused = await warned(rome, home, "snippet", "ProviderRefused")
        assert "nginx.ingress.kubernetes.io/server-snippet" in refused, refused
        not_reflected = await warned(rome, home, "classless", "NotReflected")
        assert "ingressClassName" in not_reflected, not_reflected
        for name in ("snippet", "classless"):
            assert await get(milan, INGRESSES, name, twin) is None

        await rome.delete(INGRESSES, "site", namespace=home)
        await until(milan, INGRESSES, "site", twin, None)


async def warned(client: KubeClient, namespace: str, name: str, reason: str) -> str:
    """The message of the Warning Event ``reason`` on object ``name``, once there is one."""
    found: list[str] = []

    async def seen() -> bool:
        events, _ = await client.list_all(EVENTS, namespace=namespace)
        found.extend(e["message"] for e in events if e["reason"] == reason and e["involvedObject"]["name"] == name)
        return bool(found)

    await eventually(seen, timeout=60, message=f"a {reason} Event on {namespace}/{name}")
    return found[0]


def _annotation(key: str) -> str:
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


INGRESS_ATTACKS: list[tuple[str, list[Obj], str]] = [
    (
        "a default backend",
        [{"op": "add", "path": "/spec/defaultBackend", "value": {"service": {"name": "web", "port": {"number": 80}}}}],
        "spec.defaultBackend",
    ),
    (
        "a class not offered",
        [{"op": "replace", "path": "/spec/ingressClassName", "value": "internal"}],
        "spec.ingressClassName",
    ),
    ("no class", [{"op": "remove", "path": "/spec/ingressClassName"}], "spec.ingressClassName"),
    (
        "the legacy class annotation",
        [{"op": "add", "path": _annotation("kubernetes.io/ingress.class"), "value": "public"}],
        "kubernetes.io/ingress.class",
    ),
    (
        "a host not allowed",
        [{"op": "replace", "path": "/spec/rules/0/host", "value": "www.milan.example.com"}],
        "spec.rules",
    ),
    ("the parent domain", [{"op": "replace", "path": "/spec/rules/0/host", "value": "rome.example.com"}], "spec.rules"),
    ("a rule without a host", [{"op": "remove", "path": "/spec/rules/0/host"}], "spec.rules"),
    (
        "a TLS host not allowed",
        [{"op": "replace", "path": "/spec/tls/0/hosts/0", "value": "milan.example.com"}],
        "spec.tls",
    ),
    (
        "a configuration snippet",
        [
            {
                "op": "add",
                "path": _annotation("nginx.ingress.kubernetes.io/configuration-snippet"),
                "value": "return 200;",
            }
        ],
        "nginx.ingress.kubernetes.io/configuration-snippet",
    ),
    (
        "a server snippet",
        [{"op": "add", "path": _annotation("nginx.ingress.kubernetes.io/server-snippet"), "value": "location / {}"}],
        "nginx.ingress.kubernetes.io/server-snippet",
    ),
]


async def test_the_provider_refuses_ingresses_outside_its_policy_from_the_peer_itself(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """rome's own identity, rome's liqo stopped: each Ingress milan's policy does not allow is refused."""
    twin = offloaded.twin
    identity = await peering.peer_kubeconfig(rome, sites["milan"].cluster_id)
    async with (
        stopped(sites["rome"], MANAGER, VIRTUAL_KUBELET),
        KubeClient.from_kubeconfig_dict(identity, name="rome@milan") as as_rome,
    ):
        # No policy offers rome an ingress class: none of its Ingresses, however plain.
        with pytest.raises(ApiError) as refused:
            await as_rome.create(INGRESSES, offered(unique("plain"), twin, "web"))
        assert refused.value.status == 403, refused.value
        assert "spec.ingressClassName" in refused.value.message

        async with ingress_policy(milan, sites["rome"].cluster_id, **OFFER):
            name = unique("within")

            async def allowed() -> bool:
                try:
                    await as_rome.create(INGRESSES, offered(name, twin, "web"), dry_run=True)
                except ApiError:
                    return False
                return True

            await eventually(allowed, timeout=30, message="milan's twin following the policy offering rome a class")
            for attack, patch, field in INGRESS_ATTACKS:
                body = apply_patch(offered(name, twin, "web"), patch)
                with pytest.raises(ApiError) as refused:
                    await as_rome.create(INGRESSES, body)
                assert refused.value.status == 403, (attack, refused.value)
                assert field in refused.value.message, (attack, refused.value.message)
                assert await get(milan, INGRESSES, name, twin) is None, attack
            # The same Ingress within the policy is stored; changed into an attack it is refused.
            await as_rome.create(INGRESSES, offered(name, twin, "web"))
            current = await milan.get(INGRESSES, name, namespace=twin)
            for attack, patch, field in INGRESS_ATTACKS:
                body = apply_patch(offered(name, twin, "web"), patch)
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                with pytest.raises(ApiError) as refused:
                    await as_rome.replace(INGRESSES, body)
                assert field in refused.value.message, (attack, refused.value.message)
            assert (await milan.get(INGRESSES, name, namespace=twin))["metadata"]["resourceVersion"] == current[
                "metadata"
            ]["resourceVersion"]
            await as_rome.delete(INGRESSES, name, namespace=twin)

        # The policy gone, the twin follows: nothing is offered any more.
        async def refused_again() -> bool:
            try:
                await as_rome.create(INGRESSES, offered(unique("late"), twin, "web"), dry_run=True)
            except ApiError as exc:
                return "spec.ingressClassName" in exc.message
            return False

        await eventually(refused_again, timeout=30, message="milan's twin following the policy's deletion")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"type": "NodePort"}, "spec.type"),
        ({"type": "LoadBalancer"}, "spec.type"),
        ({"externalIPs": ["192.0.2.10"]}, "spec.externalIPs"),
        ({"loadBalancerIP": "192.0.2.20"}, "spec.loadBalancer"),
        ({"type": "ExternalName", "externalName": "kubernetes.default.svc.cluster.local"}, "spec.type"),
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
