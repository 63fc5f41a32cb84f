"""Reflection: the pure forging of copies, pod tokens and mirrored Events, and the reconciles on a fake API."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime
import functools
import re
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.resources import NAMESPACE_OFFLOADINGS
from liqo.apps.virtualkubelet import parse_args
from liqo.install.manifests import virtual_kubelet_rules
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, ConflictError
from liqo.kube.events import EventRecorder
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import CONFIGMAPS, EVENTS, INGRESSES, PODS, SECRETS, SERVICES, Resource
from liqo.virtualkubelet.forge import common, configdata
from liqo.virtualkubelet.forge import events as forge_events
from liqo.virtualkubelet.forge import pods as forge_pods
from liqo.virtualkubelet.forge import services as forge_services
from liqo.virtualkubelet.forge import tokens as forge_tokens
from liqo.virtualkubelet.reflection.copies import CopyReflector, copied_kinds
from liqo.virtualkubelet.reflection.events import EventReflector
from liqo.virtualkubelet.reflection.manager import Addresses, ReflectionManager
from liqo.virtualkubelet.reflection.steps import ReflectionPolicy
from liqo.virtualkubelet.reflection.tokens import TokenReflector, token_secrets
from tests.shared import eventually
from tests.unit.fakeapi import FakeApi

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
HOME_ID = "rome-id"
PROVIDER_ID = "milan-id"
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def configmap(name: str = "settings", **fields: Any) -> Obj:
    meta = {"name": name, "namespace": "demo", "uid": "c1", "resourceVersion": "5"}
    return {"metadata": meta | fields.pop("metadata", {}), "data": {"a": "1"}} | fields


def secret(name: str = "creds", **fields: Any) -> Obj:
    return configmap(name, **({"data": {"p": "cA=="}, "type": "Opaque"} | fields))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def token_volume(**token: Any) -> Obj:
    sources = [
        {"serviceAccountToken": {"path": "token", **token}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
    ]
    return {"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": sources}}


def home_pod(name: str = "web-1", uid: str = "u1", **spec: Any) -> Obj:
    mount = {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
    base = {
        "nodeName": "liqo-milan",
        "serviceAccountName": "builder",
        "containers": [{"name": "c", "image": "nginx", "volumeMounts": [mount]}],
        "volumes": [token_volume(expirationSeconds=3607), {"name": "data", "configMap": {"name": "settings"}}],
    }
    return {"metadata": {"name": name, "namespace": "demo", "uid": uid}, "spec": base | spec}


# -- ConfigMaps and Secrets ---------------------------------------------------------------------------------


def test_never_reflected() -> None:
    assert configdata.reflectable(configmap(), resource=CONFIGMAPS, provider_id=PROVIDER_ID)
    assert configdata.reflectable(secret(), resource=SECRETS, provider_id=PROVIDER_ID)
    assert not configdata.reflectable(
        configmap(configdata.ROOT_CA_CONFIGMAP), resource=CONFIGMAPS, provider_id=PROVIDER_ID
    )
    assert configdata.reflectable(
        secret(configdata.ROOT_CA_CONFIGMAP), resource=SECRETS, provider_id=PROVIDER_ID
    )  # only the ConfigMap is the CA's
    assert not configdata.reflectable(
        secret(type=configdata.SERVICE_ACCOUNT_TOKEN_TYPE), resource=SECRETS, provider_id=PROVIDER_ID
    )
    skip = {"annotations": {names.SKIP_REFLECTION: "true"}}
    assert not configdata.reflectable(configmap(metadata=skip), resource=CONFIGMAPS, provider_id=PROVIDER_ID)
    assert not configdata.reflectable(secret(metadata=skip), resource=SECRETS, provider_id=PROVIDER_ID)
    assert configdata.reflectable(
        configmap(metadata={"annotations": {names.SKIP_REFLECTION: "false"}}),
        resource=CONFIGMAPS,
        provider_id=PROVIDER_ID,
    )
    # Copies and pod tokens are never copied on (a twin that is itself offloaded).
    assert not configdata.reflectable(
        configmap(metadata={"labels": {names.ORIGIN: "x"}}), resource=CONFIGMAPS, provider_id=PROVIDER_ID
    )
    assert not configdata.reflectable(
        secret(metadata={"labels": {names.POD_TOKEN: "true"}}), resource=SECRETS, provider_id=PROVIDER_ID
    )


def test_copies_and_pod_tokens_go_back_to_the_cluster_they_came_from_and_nowhere_else() -> None:
    # A tether's controlling peer sends the tethered cluster's pods back to it: they need its copies there.
    back = configmap(metadata={"labels": {names.ORIGIN: PROVIDER_ID}})
    assert configdata.reflectable(back, resource=CONFIGMAPS, provider_id=PROVIDER_ID)
    assert not configdata.reflectable(back, resource=CONFIGMAPS, provider_id="a-third-cluster")
    token = secret(metadata={"labels": names.peer_labels(PROVIDER_ID) | {names.POD_TOKEN: "true"}})
    assert configdata.reflectable(token, resource=SECRETS, provider_id=PROVIDER_ID)  # to the cluster that issued it
    assert not configdata.reflectable(token, resource=SECRETS, provider_id="a-third-cluster")
    skipped = configmap(
        metadata={"labels": {names.ORIGIN: PROVIDER_ID}, "annotations": {names.SKIP_REFLECTION: "true"}}
    )
    assert not configdata.reflectable(skipped, resource=CONFIGMAPS, provider_id=PROVIDER_ID)
    # Back there, a pod token is a plain copy: that hop's token reflector did not write it.
    copy = configdata.reflected_copy(token, resource=SECRETS, namespace="demo-rome", home_cluster_id=HOME_ID)
    assert names.POD_TOKEN not in copy["metadata"]["labels"]
    assert copy["metadata"]["labels"][names.ORIGIN] == HOME_ID


def test_the_copy_keeps_content_and_metadata_and_is_marked() -> None:
    home = secret(
        immutable=True,
        metadata={
            "labels": {"app": "web"},
            "annotations": {"team": "a", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
        },
    )
    copy = configdata.reflected_copy(home, resource=SECRETS, namespace="demo-rome", home_cluster_id=HOME_ID)
    assert copy["apiVersion"] == "v1"
    assert copy["kind"] == "Secret"
    assert copy["metadata"] == {
        "name": "creds",
        "namespace": "demo-rome",
        "labels": {"app": "web"} | names.peer_labels(HOME_ID) | {names.ORIGIN: HOME_ID},
        "annotations": {"team": "a"},
    }
    assert (copy["data"], copy["type"], copy["immutable"]) == (home["data"], "Opaque", True)
    assert common.is_copy(copy, origin=HOME_ID)
    assert not common.is_copy(copy, origin="someone-else")
    assert not common.is_copy(configmap(), origin=HOME_ID)  # a namesake made on the provider


@given(
    data=st.dictionaries(st.from_regex(r"[a-z]{1,5}", fullmatch=True), st.text(max_size=5), max_size=3),
    labels=st.dictionaries(st.sampled_from(["app", names.ORIGIN, names.REMOTE_CLUSTER_ID, "x"]), st.text(max_size=3)),
)
def test_a_copy_is_current_exactly_when_it_says_what_home_says(data: dict[str, str], labels: dict[str, str]) -> None:
    home = configmap(data=data, metadata={"labels": labels})
    desired = configdata.reflected_copy(home, resource=CONFIGMAPS, namespace="t", home_cluster_id=HOME_ID)
    # As the API server returns it: with uid and resourceVersion, without an empty data map.
    read = {k: v for k, v in desired.items() if not (k == "data" and not v)}
    read["metadata"] = desired["metadata"] | {"uid": "r1", "resourceVersion": "9"}
    assert common.is_copy(read, origin=HOME_ID)  # the marker wins over the home object's own labels
    assert configdata.copy_is_current(read, desired)
    assert not configdata.must_replace(read, desired)
    changed = configdata.reflected_copy(
        configmap(data=data | {"new": "v"}, metadata={"labels": labels}),
        resource=CONFIGMAPS,
        namespace="t",
        home_cluster_id=HOME_ID,
    )
    assert not configdata.copy_is_current(read, changed)


def test_an_immutable_or_retyped_copy_is_replaced_not_updated() -> None:
    old = configdata.reflected_copy(secret(immutable=True), resource=SECRETS, namespace="t", home_cluster_id=HOME_ID)
    same = configdata.reflected_copy(secret(immutable=True), resource=SECRETS, namespace="t", home_cluster_id=HOME_ID)
    assert not configdata.must_replace(old, same)
    new_data = configdata.reflected_copy(
        secret(immutable=True, data={"p": "eA=="}), resource=SECRETS, namespace="t", home_cluster_id=HOME_ID
    )
    assert configdata.must_replace(old, new_data)
    retyped = configdata.reflected_copy(
        secret(type="kubernetes.io/tls"), resource=SECRETS, namespace="t", home_cluster_id="r"
    )
    assert configdata.must_replace(
        configdata.reflected_copy(secret(), resource=SECRETS, namespace="t", home_cluster_id="r"), retyped
    )
    mutable = configdata.reflected_copy(secret(), resource=SECRETS, namespace="t", home_cluster_id=HOME_ID)
    assert not configdata.must_replace(mutable, new_data | {"immutable": False})


def test_the_policy_is_per_kind() -> None:
    assert ReflectionPolicy().reflects(CONFIGMAPS)
    assert ReflectionPolicy().reflects(SECRETS)
    policy = ReflectionPolicy(secrets="None")
    assert policy.reflects(CONFIGMAPS)
    assert not policy.reflects(SECRETS)
    args = parse_args(["--reflect-configmaps=None"])
    assert (args.reflect_configmaps, args.reflect_secrets) == ("None", "All")
    with pytest.raises(SystemExit):
        parse_args(["--reflect-secrets=Some"])


# -- ServiceAccount tokens ----------------------------------------------------------------------------------


@given(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", fullmatch=True))
def test_the_token_secret_name_is_a_valid_name_of_its_own(pod: str) -> None:
    name = forge_tokens.token_secret_name(pod)
    assert len(name) <= 253
    assert DNS_SUBDOMAIN.match(name)
    assert name == forge_tokens.token_secret_name(pod)
    assert name != forge_tokens.token_secret_name(pod + "x")
    assert name != f"{pod}-token"  # a plausible Secret of the user's


def test_the_shadow_pod_mounts_the_token_secret_where_the_projected_volume_was() -> None:
    pod = home_pod()
    spec = forge_pods.shadow_pod(pod, namespace="demo-rome", home_cluster_id=HOME_ID)["spec"]["pod"]
    secret_volume = {"secretName": forge_tokens.token_secret_name("web-1"), "defaultMode": 420}
    assert spec["volumes"] == [
        {"name": "kube-api-access-abcde", "secret": secret_volume},
        {"name": "data", "configMap": {"name": "settings"}},
    ]
    assert spec["containers"] == pod["spec"]["containers"]  # mounts unchanged: same volume name, same path
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec
    user_projected = {"name": "mine", "projected": {"sources": []}}
    assert forge_pods.remote_pod_spec({"volumes": [user_projected]}, token_secret="x")["volumes"] == [user_projected]


def test_the_token_request_is_bound_to_the_pod() -> None:
    pod = home_pod()
    volume = forge_tokens.token_volume(pod["spec"])
    assert volume is not None
    assert forge_tokens.token_seconds(volume) == 3607
    assert forge_tokens.token_seconds(token_volume()) == forge_tokens.DEFAULT_TOKEN_SECONDS
    assert forge_tokens.service_account_of(pod) == "builder"
    assert forge_tokens.service_account_of(home_pod(serviceAccountName=None)) == "default"
    request = forge_tokens.token_request(pod, seconds=3607)
    assert request["spec"] == {
        "expirationSeconds": 3607,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web-1", "uid": "u1"},
    }
    assert forge_tokens.token_volume(home_pod(volumes=[])) is None


@given(
    issued=st.datetimes(min_value=datetime.datetime(2020, 1, 1), max_value=datetime.datetime(2040, 1, 1)),
    lifetime=st.integers(min_value=600, max_value=2**32),
)
def test_tokens_are_renewed_at_80_percent_of_their_lifetime(issued: datetime.datetime, lifetime: int) -> None:
    issued = issued.replace(tzinfo=datetime.UTC)
    expires = issued + datetime.timedelta(seconds=lifetime)
    renew = forge_tokens.renewal_time(issued=issued, expires=expires)
    assert issued < renew < expires
    assert abs((renew - issued).total_seconds() - 0.8 * lifetime) < 1


def test_the_token_secret_holds_token_ca_namespace_and_when_to_renew() -> None:
    renew = NOW + datetime.timedelta(minutes=48)
    made = forge_tokens.token_secret(
        home_pod(), namespace="demo-rome", home_cluster_id=HOME_ID, token="T", ca="CA", renew_at=renew
    )
    assert made["metadata"]["name"] == forge_tokens.token_secret_name("web-1")
    assert made["data"] == {"token": b64("T"), "ca.crt": b64("CA"), "namespace": b64("demo")}
    assert forge_tokens.is_pod_token(made, home_cluster_id=HOME_ID)
    assert not forge_tokens.is_pod_token(made, home_cluster_id="other")
    assert not common.is_copy(made, origin=HOME_ID)
    assert forge_tokens.token_renew_at(made, home_pod(), ca="CA") == renew
    assert forge_tokens.token_renew_at(made, home_pod(uid="u2"), ca="CA") is None  # a namesake: its token died
    assert forge_tokens.token_renew_at(made, home_pod(), ca="NEW CA") is None


def test_a_pod_token_secret_requeues_its_home_pod() -> None:
    made = forge_tokens.token_secret(
        home_pod(), namespace="demo-rome", home_cluster_id=HOME_ID, token="T", ca="CA", renew_at=NOW
    )
    keys = functools.partial(forge_tokens.token_owner_keys, home_namespace="demo", home_cluster_id=HOME_ID)
    assert keys(made) == ["demo/web-1"]
    assert keys({"metadata": {"name": "web-1-token-x", "annotations": {names.HOME_POD: "web-1"}}}) == []


# -- Events -------------------------------------------------------------------------------------------------


def remote_event(**fields: Any) -> Obj:
    base = {
        "metadata": {"name": "web-1.17a", "namespace": "demo-rome", "uid": "e1"},
        "involvedObject": {
            "kind": "Pod",
            "name": "web-1",
            "namespace": "demo-rome",
            "uid": "r1",
            "fieldPath": "spec.containers{c}",
        },
        "type": "Warning",
        "reason": "BackOff",
        "message": "back-off restarting",
        "count": 4,
        "source": {"component": "kubelet", "host": "milan-node-1"},
        "firstTimestamp": "2030-01-01T00:00:00Z",
        "lastTimestamp": "2030-01-01T00:05:00Z",
    }
    return base | fields


def test_the_mirror_is_the_same_event_about_the_home_pod() -> None:
    mirror = forge_events.mirrored_event(remote_event(), home_object=home_pod(), provider_id=PROVIDER_ID)
    assert mirror["metadata"] == {
        "name": "web-1.17a",
        "namespace": "demo",
        "labels": names.peer_labels(PROVIDER_ID) | {names.ORIGIN: PROVIDER_ID},
    }
    assert mirror["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web-1",
        "namespace": "demo",
        "uid": "u1",
        "fieldPath": "spec.containers{c}",
    }
    picked = {k: mirror[k] for k in ("type", "reason", "message", "count", "firstTimestamp", "lastTimestamp")}
    assert picked == {k: remote_event()[k] for k in picked}
    assert mirror["source"] == {"component": "kubelet"}


def test_events_written_through_events_k8s_io_are_folded_into_core_fields() -> None:
    event = remote_event(
        count=None,
        firstTimestamp=None,
        lastTimestamp=None,
        source={},
        reportingComponent="default-scheduler",
        eventTime="2030-01-01T00:00:00.123456Z",
        series={"count": 3, "lastObservedTime": "2030-01-01T00:01:00.5Z"},
    )
    mirror = forge_events.mirrored_event(event, home_object=home_pod(), provider_id=PROVIDER_ID)
    assert mirror["count"] == 3
    assert (mirror["firstTimestamp"], mirror["lastTimestamp"]) == ("2030-01-01T00:00:00Z", "2030-01-01T00:01:00Z")
    assert mirror["source"] == {"component": "default-scheduler"}
    assert forge_events.mirrored_event(remote_event(count=None), home_object=home_pod(), provider_id="m")["count"] == 1
    long = forge_events.mirrored_event(remote_event(message="x" * 5000), home_object=home_pod(), provider_id="m")
    assert len(long["message"]) == 1024


def test_only_events_about_pods_never_placements_nor_mirrors_are_mirrored() -> None:
    assert forge_events.mirrorable(remote_event())
    # The provider's placement is its own (home's Scheduled names the virtual node); why it cannot place is news.
    assert not forge_events.mirrorable(remote_event(type="Normal", reason="Scheduled"))
    assert forge_events.mirrorable(remote_event(reason="FailedScheduling"))
    assert forge_events.WATCHED == "reason!=Scheduled"
    shadow = remote_event(involvedObject={"kind": "ShadowPod", "name": "web-1"})
    assert not forge_events.mirrorable(shadow)
    mirror = forge_events.mirrored_event(remote_event(), home_object=home_pod(), provider_id=PROVIDER_ID)
    assert not forge_events.mirrorable(mirror)  # a mirror seen again (both clusters offloading to each other)


def test_the_virtual_kubelet_may_request_tokens_and_apply_events_at_home() -> None:
    rules = virtual_kubelet_rules()
    assert {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]} in rules
    assert any("events" in r["resources"] and "patch" in r["verbs"] for r in rules)


# -- reconciles, on a fake API ------------------------------------------------------------------------------


def api(*objects: tuple[Resource, Obj]) -> FakeApi:
    """The fake API, its writes recorded and none landing (each test lands what it chooses, with ``put``);
    TokenRequests answered with tokens ``token-1``, ``token-2``... of the lifetime asked."""
    minted = 0

    def token(method: str, path: str, body: Any) -> Obj:
        nonlocal minted
        minted += 1
        lifetime = datetime.timedelta(seconds=body["spec"]["expirationSeconds"])
        expires = (NOW + lifetime).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"status": {"token": f"token-{minted}", "expirationTimestamp": expires}}

    return FakeApi(*objects, lands=False, answer=token)


def writes(api: FakeApi) -> list[tuple[str, str, Any]]:
    """Every write and raw request, in order: (verb, plural, body), a delete's ``namespace/name``, a request's
    (method, path, body)."""
    done: list[tuple[str, str, Any]] = []
    for call in api.calls:
        if call.verb == "request":
            done.append((call.options["method"], str(call.name), call.body))
        elif call.verb == "delete":
            done.append(("delete", call.plural, f"{call.namespace}/{call.name}"))
        elif call.verb in ("create", "replace", "apply"):
            done.append((call.verb, call.plural, call.body))
    return done


OFFLOADING = {
    "metadata": {"name": "offloading", "namespace": "demo"},
    "status": {
        "remoteNamespacesConditions": [{"clusterID": PROVIDER_ID, "phase": "Ready", "remoteNamespace": "demo-rome"}]
    },
}


@dataclasses.dataclass
class Reflected:
    """The reflectors of one virtual node over namespace ``demo`` (twin ``demo-rome``)."""

    manager: ReflectionManager
    home_pods: Informer
    copies: CopyReflector
    tokens: TokenReflector
    events: EventReflector


@contextlib.asynccontextmanager
async def reflection(home: FakeApi, provider: FakeApi, **policy: Any) -> AsyncIterator[Reflected]:
    """The reflectors of namespace ``demo`` (twin ``demo-rome``), their informers synced, their controllers not run."""
    home.put(NAMESPACE_OFFLOADINGS, OFFLOADING)
    offloadings = Informer(client=home, resource=NAMESPACE_OFFLOADINGS)
    pods = Informer(client=home, resource=PODS)
    manager = ReflectionManager(
        home=cast(KubeClient, home),
        provider=cast(KubeClient, provider),
        provider_id=PROVIDER_ID,
        node_name="liqo-milan",
        home_cluster_id=HOME_ID,
        offloadings=offloadings,
        addresses=Addresses(home=None, home_name="rome", provider=lambda: None, provider_name="milan"),
        events=EventRecorder(client=home, component="test"),
    )
    made = Reflected(
        manager=manager,
        home_pods=pods,
        copies=CopyReflector(
            manager=manager, policy=ReflectionPolicy(**policy), kinds=copied_kinds(ReflectionPolicy(**policy))
        ),
        tokens=TokenReflector(manager=manager, home_pods=pods, clock=lambda: NOW),
        events=EventReflector(manager=manager, home_pods=pods),
    )
    manager.register(made.copies, made.tokens, made.events)
    tasks = [asyncio.create_task(offloadings.run()), asyncio.create_task(pods.run())]
    try:
        await offloadings.wait_synced(5)
        await pods.wait_synced(5)
        manager.twins_changed()

        async def synced() -> bool:
            pair = manager.pair("demo")
            return pair is not None and pair.synced

        await eventually(synced, timeout=5, message="synced")
        yield made
    finally:
        for task in tasks:
            task.cancel()
        await manager._pairs.close()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _true(value: Any) -> bool:
    return bool(value)


ROOT_CA = {"metadata": {"name": configdata.ROOT_CA_CONFIGMAP, "namespace": "demo"}, "data": {"ca.crt": "HOME CA"}}


async def test_a_pod_gets_a_token_secret_renewed_at_80_percent() -> None:
    home = api((PODS, home_pod()), (CONFIGMAPS, dict(ROOT_CA)))
    provider = api()
    async with reflection(home, provider) as made:
        result = await made.tokens.reconcile("demo/web-1")
        method, path, body = writes(home)[0]
        assert (method, path) == ("POST", "/api/v1/namespaces/demo/serviceaccounts/builder/token")
        assert body["spec"]["boundObjectRef"]["uid"] == "u1"
        [(verb, plural, written)] = writes(provider)
        assert (verb, plural) == ("create", "secrets")  # a name only we write: no server-side apply
        assert written["data"]["token"] == b64("token-1")
        assert written["data"]["ca.crt"] == b64("HOME CA")
        assert result is not None
        assert result.requeue_after == pytest.approx(0.8 * 3607, abs=1)

        # Written and not due: nothing is asked, the next look is at the renewal time.
        provider.put(SECRETS, written)
        await eventually(lambda: _true(_remote(made, SECRETS, written)), timeout=5, message="the Secret seen")
        result = await made.tokens.reconcile("demo/web-1")
        assert len(writes(home)) == 1
        assert result is not None
        assert result.requeue_after == pytest.approx(0.8 * 3607, abs=1)

        # Due (the clock moved past the renewal time): a new token.
        made.tokens._clock = lambda: NOW + datetime.timedelta(seconds=0.81 * 3607)
        await made.tokens.reconcile("demo/web-1")
        assert len(writes(home)) == 2
        verb, _, renewed = writes(provider)[-1]
        assert (verb, renewed["data"]["token"]) == ("replace", b64("token-2"))
        cached = _remote(made, SECRETS, written)
        assert cached is not None
        assert renewed["metadata"]["resourceVersion"] == cached["metadata"]["resourceVersion"]

        # The pod is gone: so goes its Secret.
        home.remove(PODS, "web-1", namespace="demo")
        await eventually(lambda: _true(not made.home_pods.store.list()), timeout=5, message="the pod gone")
        assert await made.tokens.reconcile("demo/web-1") is None
        assert writes(provider)[-1] == ("delete", "secrets", f"demo-rome/{forge_tokens.token_secret_name('web-1')}")


async def test_no_token_without_the_projected_volume_nor_before_the_home_ca() -> None:
    home = api((PODS, home_pod(volumes=[])), (PODS, home_pod("web-2", "u2")))
    provider = api()
    async with reflection(home, provider) as made:
        assert await made.tokens.reconcile("demo/web-1") is None
        assert await made.tokens.reconcile("demo/web-2") is None  # kube-root-ca.crt not published yet
        assert not writes(home)
        assert not writes(provider)


async def test_copies_follow_home_and_never_touch_what_is_not_ours() -> None:
    settings, theirs, changed = configmap(), configmap("theirs"), configmap("changed", data={"v": "2"})
    home = api(
        *[(CONFIGMAPS, obj) for obj in (settings, theirs, changed, dict(ROOT_CA))],
        (SECRETS, secret()),
    )

    def copy(resource: Resource, obj: Obj) -> Obj:
        return configdata.reflected_copy(obj, resource=resource, namespace="demo-rome", home_cluster_id=HOME_ID)

    foreign = {"metadata": {"name": "theirs", "namespace": "demo-rome"}, "data": {"x": "y"}}
    provider = api(
        (CONFIGMAPS, foreign),
        (CONFIGMAPS, copy(CONFIGMAPS, configmap("gone"))),
        (CONFIGMAPS, copy(CONFIGMAPS, configmap("changed", data={"v": "1"}))),
        (SECRETS, copy(SECRETS, secret())),
    )
    async with reflection(home, provider, secrets="None") as made:
        await made.copies.reconcile(("configmaps", "demo", "settings"))
        assert writes(provider)[-1][:2] == ("create", "configmaps")
        assert writes(provider)[-1][2]["data"] == settings["data"]
        await made.copies.reconcile(("configmaps", "demo", "changed"))  # at the version the cache holds
        [(verb, _, updated)] = writes(provider)[1:]
        assert (verb, updated["data"]) == ("replace", {"v": "2"})
        assert (
            updated["metadata"]["resourceVersion"]
            == provider.objects[("configmaps", "demo-rome", "changed")]["metadata"]["resourceVersion"]
        )
        await made.copies.reconcile(("configmaps", "demo", "theirs"))  # a namesake on the provider: left alone
        await made.copies.reconcile(("configmaps", "demo", configdata.ROOT_CA_CONFIGMAP))
        assert len(writes(provider)) == 2
        assert any(c[0] == "create" and c[2]["reason"] == "ReflectionConflict" for c in writes(home))
        await made.copies.reconcile(("configmaps", "demo", "gone"))  # deleted at home
        assert writes(provider)[-1] == ("delete", "configmaps", "demo-rome/gone")
        await made.copies.reconcile(("secrets", "demo", "creds"))  # the policy says None: the old copy goes
        assert writes(provider)[-1] == ("delete", "secrets", "demo-rome/creds")


async def test_what_is_not_copied_is_said_at_home_once_and_a_refused_copy_is_retried() -> None:
    alias = {
        "metadata": {"name": "alias", "namespace": "demo", "uid": "s1"},
        "spec": {"type": "ExternalName", "externalName": "db.example.com"},
    }
    site = {
        "metadata": {"name": "site", "namespace": "demo", "uid": "i1"},
        "spec": {"ingressClassName": "public", "rules": [{"host": "site.example.com"}]},
    }
    home = api((SERVICES, alias), (INGRESSES, site))
    provider = api()
    refusal = (
        "ValidatingAdmissionPolicy denied request: spec.ingressClassName: public is not a class this cluster offers"
    )
    provider.refuse("create", INGRESSES, ApiError(403, "Forbidden", refusal))

    def said(reason: str) -> list[str]:
        return [c[2]["message"] for c in writes(home) if c[0] == "create" and c[2].get("reason") == reason]

    async with reflection(home, provider) as made:
        for _ in range(2):
            assert await made.copies.reconcile(("services", "demo", "alias")) is None
        assert not writes(provider)  # an ExternalName is never copied...
        [not_reflected] = said("NotReflected")  # ...and said once, not at every look
        assert "ExternalName" in not_reflected

        first = await made.copies.reconcile(("ingresses", "demo", "site"))
        second = await made.copies.reconcile(("ingresses", "demo", "site"))
        assert said("ProviderRefused") == [refusal]  # the provider's own words, once
        assert first is not None
        assert second is not None
        assert (first.requeue_after, second.requeue_after) == (1.0, 2.0)  # retried, backing off

        provider.allow("create", INGRESSES)  # the provider's policy now offers the class
        assert await made.copies.reconcile(("ingresses", "demo", "site")) is None
        assert writes(provider)[-1][:2] == ("create", "ingresses")
        later = "ValidatingAdmissionPolicy denied request: spec.rules[].host: site.example.com not within the hosts"
        provider.refuse("create", INGRESSES, ApiError(403, "Forbidden", later))  # the policy tightened since
        again = await made.copies.reconcile(("ingresses", "demo", "site"))
        assert again is not None
        assert again.requeue_after == 1.0  # a new refusal starts over
        assert said("ProviderRefused") == [refusal, later]


def remote_web_pod() -> Obj:
    """The provider's pod made for home pod ``u1`` (``demo/web-1``), as far as Event mirroring reads it."""
    return {
        "metadata": {
            "name": "web-1",
            "namespace": "demo-rome",
            "uid": "r1",
            "labels": {names.SHADOW_POD: "web-1"},
            "annotations": {names.HOME_POD_UID: "u1"},
        }
    }


async def test_events_about_our_pods_are_mirrored_once_per_event() -> None:
    remote_pod = remote_web_pod()
    other = remote_event(metadata={"name": "web-1.17b", "namespace": "demo-rome"})
    other["involvedObject"] = other["involvedObject"] | {"uid": "old-pod"}
    mirrored = forge_events.mirrored_event(remote_event(), home_object=home_pod(), provider_id=PROVIDER_ID)
    mirrored["metadata"] |= {"name": "web-1.17c", "namespace": "demo-rome"}
    home = api((PODS, home_pod()))
    provider = api((PODS, remote_pod), (EVENTS, remote_event()), (EVENTS, other), (EVENTS, mirrored))
    async with reflection(home, provider) as made:
        await made.events.reconcile("demo-rome/web-1.17a")
        [(verb, plural, event)] = writes(home)
        assert (verb, plural, event["involvedObject"]["uid"], event["count"]) == ("create", "events", "u1", 4)
        await made.events.reconcile("demo-rome/web-1.17a")  # re-queued (its pod appearing...): nothing new
        await made.events.reconcile("demo-rome/web-1.17b")  # about an earlier pod of that name
        await made.events.reconcile("demo-rome/web-1.17c")  # itself a mirror
        assert len(writes(home)) == 1

        # Its count grows on the provider: the mirror exists, so it is applied.
        grown = remote_event() | {"count": 5}
        provider.put(EVENTS, grown)  # MODIFIED
        await eventually(
            lambda: _true((_remote(made, EVENTS, grown) or {}).get("count") == 5), timeout=5, message="seen"
        )
        await made.events.reconcile("demo-rome/web-1.17a")
        assert [(c[0], c[2]["count"]) for c in writes(home)[1:]] == [("apply", 5)]


async def test_a_mirror_found_made_by_a_previous_run_is_applied() -> None:
    remote_pod = remote_web_pod()
    home = api((PODS, home_pod()))
    home.refuse("create", EVENTS, ConflictError(409, "AlreadyExists", "already exists"), name="web-1.17a")
    provider = api((PODS, remote_pod), (EVENTS, remote_event()))
    async with reflection(home, provider) as made:
        await made.events.reconcile("demo-rome/web-1.17a")
        assert [c[:2] for c in writes(home)] == [("create", "events"), ("apply", "events")]


def _remote(made: Reflected, resource: Resource, obj: Obj) -> Obj | None:
    pair = made.manager.pair("demo")
    assert pair is not None
    key = f"demo-rome/{obj['metadata']['name']}"
    if resource == EVENTS:  # the event reflector's informer
        return pair.remote(resource, field_selector=forge_events.WATCHED).store.get(key)
    if resource == SECRETS and names.POD_TOKEN in (obj["metadata"].get("labels") or {}):
        return token_secrets(pair).store.get(key)
    return pair.remote(resource).store.get(key)


async def test_events_about_our_service_copies_are_mirrored_onto_the_home_service() -> None:
    home_service = {"metadata": {"name": "web", "namespace": "demo", "uid": "hs1"}, "spec": {"ports": []}}
    copy = forge_services.reflected_service(home_service, namespace="demo-rome", home_cluster_id=HOME_ID)
    copy["metadata"]["uid"] = "rs1"
    theirs = {"metadata": {"name": "db", "namespace": "demo-rome", "uid": "rs2"}, "spec": {}}

    def about(name: str, uid: str) -> Obj:
        involved = {"kind": "Service", "name": name, "namespace": "demo-rome", "uid": uid}
        return remote_event(
            metadata={"name": f"{name}.1", "namespace": "demo-rome"},
            involvedObject=involved,
            reason="SyncLoadBalancerFailed",
        )

    home = api((SERVICES, home_service), (SERVICES, {"metadata": {"name": "db", "namespace": "demo"}}))
    provider = api((SERVICES, copy), (SERVICES, theirs), (EVENTS, about("web", "rs1")), (EVENTS, about("db", "rs2")))
    async with reflection(home, provider) as made:
        await made.events.reconcile("demo-rome/web.1")
        [(verb, plural, event)] = writes(home)
        assert (verb, plural) == ("create", "events")
        assert event["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Service",
            "name": "web",
            "namespace": "demo",
            "uid": "hs1",
        }
        assert event["reason"] == "SyncLoadBalancerFailed"
        await made.events.reconcile("demo-rome/db.1")  # a Service the provider made: not ours to report
        assert len(writes(home)) == 1
