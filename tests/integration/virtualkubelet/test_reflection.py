"""Reflection end to end: what an offloaded namespace's pods need besides themselves, from rome to milan.

rome offloads a namespace to milan (the ``offloaded`` fixture); rome's virtual kubelet copies the
namespace's ConfigMaps and Secrets into the twin, gives each pod a home ServiceAccount token in a Secret
there, and mirrors milan's Events about the pods back onto them. Checked from both API servers, with their
admins' credentials: a TokenReview at rome says whether the token milan's pod holds is a valid home token.
"""

from __future__ import annotations

import base64
from typing import Any

from liqo.api import names
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import CONFIGMAPS, EVENTS, PODS, SECRETS, Resource
from liqo.virtualkubelet.forge import configdata as forge_configdata
from liqo.virtualkubelet.forge import tokens as forge_tokens
from tests.integration.helpers import Offloaded, Site, pod, running_pods, unique
from tests.shared import eventually

TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)


def configmap(name: str, namespace: str, data: dict[str, str], **metadata: Any) -> Obj:
    meta = {"name": name, "namespace": namespace, **metadata}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def secret(name: str, namespace: str, data: dict[str, str], **metadata: Any) -> Obj:
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
    meta = {"name": name, "namespace": namespace, **metadata}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": "Opaque", "data": encoded}


async def get(client: KubeClient, resource: Resource, name: str, namespace: str) -> Obj | None:
    try:
        return await client.get(resource, name, namespace=namespace)
    except NotFoundError:
        return None


async def until_copied(
    milan: KubeClient, resource: Resource, name: str, twin: str, *, data: dict[str, str] | None = None
) -> Obj:
    """Wait for the copy of ``name`` in the twin (holding ``data`` when given) and return it."""
    found: Obj = {}

    async def there() -> bool:
        copy = await get(milan, resource, name, twin)
        if copy is None or (data is not None and copy.get("data") != data):
            return False
        found.update(copy)
        return True

    await eventually(there, timeout=30, message=f"{resource.kind} {name} copied into {twin}")
    return found


async def until_gone(client: KubeClient, resource: Resource, name: str, namespace: str) -> None:
    async def gone() -> bool:
        return await get(client, resource, name, namespace) is None

    await eventually(gone, timeout=30, message=f"{resource.kind} {namespace}/{name} gone from {client.name}")


async def test_configmaps_and_secrets_follow_home(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    home, twin = offloaded.namespace, offloaded.twin
    rome_id = sites["rome"].cluster_id
    await rome.create(CONFIGMAPS, configmap("settings", home, {"mode": "fast"}, labels={"app": "web"}))
    await rome.create(SECRETS, secret("creds", home, {"password": "s3cret"}))
    skip = {names.SKIP_REFLECTION: "true"}
    await rome.create(CONFIGMAPS, configmap("private", home, {"x": "1"}, annotations=skip))
    await rome.create(SECRETS, secret("private", home, {"x": "1"}, annotations=skip))

    copied = await until_copied(milan, CONFIGMAPS, "settings", twin, data={"mode": "fast"})
    labels = copied["metadata"]["labels"]
    assert labels["app"] == "web"
    assert labels[names.ORIGIN] == labels[names.REMOTE_CLUSTER_ID] == rome_id
    creds = await until_copied(milan, SECRETS, "creds", twin)
    assert base64.b64decode(creds["data"]["password"]) == b"s3cret"
    assert creds["type"] == "Opaque"

    # Updates flow; the skipped ones never came; milan's own root CA stays milan's.
    await rome.patch(CONFIGMAPS, "settings", {"data": {"mode": "slow"}}, namespace=home)
    await until_copied(milan, CONFIGMAPS, "settings", twin, data={"mode": "slow"})
    assert await get(milan, CONFIGMAPS, "private", twin) is None
    assert await get(milan, SECRETS, "private", twin) is None
    root_ca = await get(milan, CONFIGMAPS, forge_configdata.ROOT_CA_CONFIGMAP, twin)
    assert root_ca is not None
    assert names.ORIGIN not in (root_ca["metadata"].get("labels") or {})
    home_ca = await rome.get(CONFIGMAPS, forge_configdata.ROOT_CA_CONFIGMAP, namespace=home)
    assert root_ca["data"]["ca.crt"] != home_ca["data"]["ca.crt"]

    # Deleted at home, or annotated to be skipped: the copy goes.
    await rome.delete(SECRETS, "creds", namespace=home)
    await until_gone(milan, SECRETS, "creds", twin)
    await rome.patch(CONFIGMAPS, "settings", {"metadata": {"annotations": skip}}, namespace=home)
    await until_gone(milan, CONFIGMAPS, "settings", twin)


async def test_a_namesake_made_on_the_provider_is_never_touched(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    home, twin = offloaded.namespace, offloaded.twin
    await milan.create(CONFIGMAPS, configmap("shared", twin, {"owner": "milan"}))
    await rome.create(CONFIGMAPS, configmap("shared", home, {"owner": "rome"}))

    async def warned() -> bool:
        events, _ = await rome.list_all(EVENTS, namespace=home)
        return any(e["reason"] == "ReflectionConflict" and e["involvedObject"]["name"] == "shared" for e in events)

    await eventually(warned, timeout=30, message="a ReflectionConflict Event on rome's ConfigMap")
    theirs = await milan.get(CONFIGMAPS, "shared", namespace=twin)
    assert theirs["data"] == {"owner": "milan"}
    await rome.delete(CONFIGMAPS, "shared", namespace=home)
    # A copy going is noticed within seconds (the test above): milan's survives the home deletion.
    await rome.create(CONFIGMAPS, configmap("marker", home, {"x": "1"}))
    await until_copied(milan, CONFIGMAPS, "marker", twin)
    assert (await milan.get(CONFIGMAPS, "shared", namespace=twin))["data"] == {"owner": "milan"}


async def test_an_offloaded_pod_mounts_home_config_and_a_valid_home_token(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    home, twin = offloaded.namespace, offloaded.twin
    await rome.create(CONFIGMAPS, configmap("settings", home, {"mode": "fast"}))
    volume = {"name": "settings", "configMap": {"name": "settings"}}
    spec = pod("reader", home)["spec"]
    spec["containers"][0]["volumeMounts"] = [{"name": "settings", "mountPath": "/etc/settings"}]
    created = await rome.create(PODS, pod("reader", home, volumes=[volume], containers=spec["containers"]))
    await running_pods(rome, home, 1)
    [remote] = await running_pods(milan, twin, 1)

    volumes = {v["name"]: v for v in remote["spec"]["volumes"]}
    assert volumes["settings"]["configMap"]["name"] == "settings"
    # KWOK runs a pod without its volumes; a kubelet would wait for the copy, which comes independently.
    await until_copied(milan, CONFIGMAPS, "settings", twin, data={"mode": "fast"})
    [token_volume] = [v for name, v in volumes.items() if name.startswith("kube-api-access-")]
    secret_name = forge_tokens.token_secret_name("reader")
    assert token_volume["secret"]["secretName"] == secret_name
    mounts = {m["name"]: m["mountPath"] for m in remote["spec"]["containers"][0]["volumeMounts"]}
    assert mounts[token_volume["name"]] == "/var/run/secrets/kubernetes.io/serviceaccount"
    assert remote["spec"]["automountServiceAccountToken"] is False

    held = await until_copied(milan, SECRETS, secret_name, twin)
    data = {key: base64.b64decode(value).decode() for key, value in held["data"].items()}
    home_ca = await rome.get(CONFIGMAPS, forge_configdata.ROOT_CA_CONFIGMAP, namespace=home)
    assert data["ca.crt"] == home_ca["data"]["ca.crt"]
    assert data["namespace"] == home
    review = await rome.create(
        TOKEN_REVIEWS,
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": data["token"]}},
    )
    status = review["status"]
    assert status["authenticated"] is True, status
    assert status["user"]["username"] == f"system:serviceaccount:{home}:default"
    assert status["user"]["extra"]["authentication.kubernetes.io/pod-uid"] == [created["metadata"]["uid"]]

    # The pod goes: so does its token Secret.
    await rome.delete(PODS, "reader", namespace=home, grace_period_seconds=0)
    await until_gone(milan, SECRETS, secret_name, twin)


async def test_events_about_the_remote_pod_show_on_the_home_pod(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    home, twin = offloaded.namespace, offloaded.twin
    created = await rome.create(PODS, pod("watched", home))
    [remote] = await running_pods(milan, twin, 1)
    involved = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "watched",
        "namespace": twin,
        "uid": remote["metadata"]["uid"],
    }

    def event(name: str, message: str, **fields: Any) -> Obj:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": twin, **fields.pop("metadata", {})},
            "involvedObject": involved,
            "type": "Warning",
            "reason": "ProbeFromMilan",
            "message": message,
            "count": 3,
            "source": {"component": "milan-test"},
            "firstTimestamp": "2030-01-01T00:00:00Z",
            "lastTimestamp": "2030-01-01T00:00:00Z",
        } | fields

    # A mirror found on milan (as if milan offloaded to rome too) is not mirrored again; it comes first, so
    # once the later one is mirrored this one has been looked at.
    marked = {"labels": {names.ORIGIN: "someone"}}
    await milan.create(EVENTS, event(f"watched.{unique('m')}", "already a mirror", metadata=marked))
    name = f"watched.{unique('e')}"
    message = f"from milan {name}"
    await milan.create(EVENTS, event(name, message))

    async def mirrored(count: int) -> Obj | None:
        events, _ = await rome.list_all(EVENTS, namespace=home)
        found = [e for e in events if e["involvedObject"]["name"] == "watched" and e["reason"] == "ProbeFromMilan"]
        return next((e for e in found if e["message"] == message and e["count"] == count), None)

    async def seen(count: int = 3) -> bool:
        return await mirrored(count) is not None

    await eventually(seen, timeout=30, message="milan's Event mirrored onto rome's pod")
    mirror = await mirrored(3)
    assert mirror is not None
    assert mirror["type"] == "Warning"
    assert mirror["involvedObject"]["uid"] == created["metadata"]["uid"]
    assert mirror["metadata"]["labels"][names.ORIGIN] == sites["milan"].cluster_id
    events, _ = await rome.list_all(EVENTS, namespace=home)
    assert not [e for e in events if e["message"] == "already a mirror"]
    # milan's scheduler placed the pod before all this: its Scheduled is milan's own, rome's names the virtual node.
    scheduled = [e for e in events if e["involvedObject"]["name"] == "watched" and e["reason"] == "Scheduled"]
    assert [e["metadata"].get("labels", {}).get(names.ORIGIN) for e in scheduled] == [None]

    # The count grows on milan: the same home Event follows, no second one.
    await milan.patch(EVENTS, name, {"count": 5, "lastTimestamp": "2030-01-01T00:01:00Z"}, namespace=twin)

    async def five() -> bool:
        return await seen(5)

    await eventually(five, timeout=30, message="the mirrored Event's count follows milan's")
    events, _ = await rome.list_all(EVENTS, namespace=home)
    assert len([e for e in events if e["message"] == message]) == 1
