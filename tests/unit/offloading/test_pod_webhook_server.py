"""The pod webhook over real loopback HTTP, with the fake API (list, watch, get): what it answers.

Also the pure parts of its registration: the AdmissionReview parsing, the install manifest, the CA bundle
patch and the shared serving certificate's checks.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from liqo.api import names
from liqo.api.resources import NAMESPACE_OFFLOADINGS
from liqo.install import manifests
from liqo.kube.errors import UnreachableError
from liqo.kube.objects import Obj
from liqo.offloading import registration
from liqo.offloading.pod_webhook import (
    MAX_REVIEW,
    NOT_SYNCED,
    InvalidReview,
    PodWebhook,
    parse_review,
    review_response,
)
from tests.unit.fakeapi import FakeApi
from tests.unit.helpers import install_manifests


def offloading(namespace: str, strategy: str = "Remote") -> Obj:
    return {
        "apiVersion": "offloading.liqo.io/v1alpha1",
        "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading", "namespace": namespace},
        "spec": {"podOffloadingStrategy": strategy},
    }


def review(namespace: str = "web", *, operation: str = "CREATE", kind: str = "Pod", **pod_spec: Any) -> Obj:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": operation,
            "object": {
                "apiVersion": "v1",
                "kind": kind,
                "metadata": {"generateName": "web-", "namespace": namespace},
                "spec": {"containers": [{"name": "c", "image": "nginx"}], **pod_spec},
            },
        },
    }


def gets(api: FakeApi) -> list[str]:
    """The namespaces whose NamespaceOffloading was read from the API server, in order."""
    return [str(call.namespace) for call in api.called("get")]


def only_what_the_webhook_may_ask(api: FakeApi) -> None:
    """Its informer lists and watches NamespaceOffloadings across namespaces; a miss reads one by name."""
    for call in api.calls:
        assert call.plural == NAMESPACE_OFFLOADINGS.plural, call
        if call.verb == "get":
            assert (call.name, call.namespace is not None) == (names.OFFLOADING, True), call
        else:
            assert (call.verb, call.namespace) in {("list", None), ("watch", None)}, call


@dataclass
class Server:
    url: str
    api: FakeApi
    webhook: PodWebhook
    session: aiohttp.ClientSession

    async def post(self, body: object, *, raw: bytes | None = None) -> tuple[int, Obj]:
        data = raw if raw is not None else orjson.dumps(body)
        async with self.session.post(f"{self.url}/mutate/pods", data=data) as response:
            return response.status, orjson.loads(await response.read())

    async def answer(self, body: object) -> Obj:
        status, answer = await self.post(body)
        assert status == 200
        assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
        response: Obj = answer["response"]
        return response


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    api = FakeApi(
        (NAMESPACE_OFFLOADINGS, offloading("web", "Remote")),
        (NAMESPACE_OFFLOADINGS, offloading("home", "Local")),
        listing=False,
    )
    webhook = PodWebhook(client=api)
    # The manager's endpoint keeps small bodies for authentication; the webhook must not inherit that.
    app = web.Application(client_max_size=64 * 1024)
    webhook.attach(app)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    async with aiohttp.ClientSession() as session:
        yield Server(f"http://127.0.0.1:{runner.addresses[0][1]}", api, webhook, session)
    await runner.cleanup()
    only_what_the_webhook_may_ask(api)


async def synced(server: Server) -> None:
    server.api.listing.set()
    assert await server.webhook.informer.wait_synced(5)


def decoded_patch(response: Obj) -> list[Obj]:
    assert response["patchType"] == "JSONPatch"
    patch: list[Obj] = orjson.loads(base64.b64decode(response["patch"]))
    return patch


async def test_a_pod_in_a_remote_namespace_gets_the_toleration_and_affinity(server: Server) -> None:
    await synced(server)
    response = await server.answer(review("web"))
    assert (response["uid"], response["allowed"]) == ("705ab4f5-6393-11e8-b7cc-42010a800002", True)
    patch = decoded_patch(response)
    assert patch[0] == {"op": "add", "path": "/spec/tolerations", "value": [names.virtual_node_toleration()]}
    assert patch[1]["path"] == "/spec/affinity"
    assert gets(server.api) == []  # served from the cache


async def test_a_local_namespace_gets_the_affinity_only(server: Server) -> None:
    await synced(server)
    patch = decoded_patch(await server.answer(review("home")))
    assert [op["path"] for op in patch] == ["/spec/affinity"]


async def test_a_cache_miss_asks_the_api_server(server: Server) -> None:
    await synced(server)
    server.api.put(NAMESPACE_OFFLOADINGS, offloading("new", "LocalAndRemote"), notify=False)  # not watched yet
    patch = decoded_patch(await server.answer(review("new")))
    assert len(patch) == 2
    response = await server.answer(review("plain"))
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}
    assert gets(server.api) == ["new", "plain"]


async def test_an_api_server_it_cannot_reach_on_a_miss_refuses_the_pod(server: Server) -> None:
    await synced(server)
    server.api.refuse("get", NAMESPACE_OFFLOADINGS, UnreachableError("connection refused"))
    response = await server.answer(review("new"))
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "cannot place pods in namespace new" in response["status"]["message"]


async def test_until_the_cache_is_synced_pods_are_refused_with_a_reason(server: Server) -> None:
    response = await server.answer(review("web"))
    assert response["allowed"] is False
    assert response["status"] == {"code": 503, "message": NOT_SYNCED}
    await synced(server)
    assert (await server.answer(review("web")))["allowed"] is True


@pytest.mark.parametrize(
    "body",
    [
        review("web", operation="UPDATE"),
        review("web", kind="Service"),
        review("web", nodeName="node-1"),
    ],
    ids=["update", "not a pod", "already bound"],
)
async def test_what_is_not_an_unbound_pod_creation_is_allowed_unchanged(server: Server, body: Obj) -> None:
    await synced(server)
    response = await server.answer(body)
    assert response == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


async def test_a_large_pod_is_accepted(server: Server) -> None:
    await synced(server)
    body = review("web")
    body["request"]["object"]["metadata"]["annotations"] = {"big": "x" * (512 * 1024)}
    assert (await server.answer(body))["allowed"] is True
    status, answer = await server.post(None, raw=b"{" + b" " * MAX_REVIEW + b"}")
    assert status == 413
    assert "larger than" in answer["reason"]


@pytest.mark.parametrize(
    "raw",
    [
        b"not json",
        b"[]",
        orjson.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}),
        orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
        orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"kind": {}}}),
        orjson.dumps(review() | {"request": review()["request"] | {"object": "pod"}}),
    ],
    ids=["not json", "not an object", "v1beta1", "no request", "no uid", "object not an object"],
)
async def test_a_malformed_review_is_400(server: Server, raw: bytes) -> None:
    await synced(server)
    status, answer = await server.post(None, raw=raw)
    assert status == 400
    assert answer["reason"]
    with pytest.raises(InvalidReview):
        parse_review(raw)


def test_a_refusal_carries_no_patch() -> None:
    answer = review_response(uid="u", patch=[{"op": "add"}], denied=(503, "later"))
    assert answer["response"] == {"uid": "u", "allowed": False, "status": {"code": 503, "message": "later"}}


async def test_the_informer_stops_with_the_application() -> None:
    api = FakeApi()
    webhook = PodWebhook(client=api)
    app = web.Application()
    webhook.attach(app)
    runner = web.AppRunner(app)
    await runner.setup()
    assert await webhook.informer.wait_synced(5)
    tasks = {t.get_name() for t in asyncio.all_tasks()}
    assert "informer namespaceoffloadings (webhook)" in tasks
    await runner.cleanup()
    assert "informer namespaceoffloadings (webhook)" not in {t.get_name() for t in asyncio.all_tasks()}


# -- registration -----------------------------------------------------------------------------------------


def test_where_the_api_server_serves_mutating_policies_the_policy_places_pods_not_the_webhook() -> None:
    policy, binding, validator = install_manifests()[-3:]
    assert (policy["kind"], binding["kind"]) == ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["paramRef"] == {"name": "offloading", "parameterNotFoundAction": "Allow"}
    assert binding["spec"]["matchResources"] == {
        "namespaceSelector": {"matchLabels": {"liqo.io/scheduling-enabled": "true"}}
    }
    assert validator["kind"] == "ValidatingWebhookConfiguration"
    assert "MutatingWebhookConfiguration" not in {m["kind"] for m in install_manifests()}


def test_install_registers_the_webhooks_last_through_the_webhook_service_by_default() -> None:
    configuration, validator = install_manifests(placement_policy=False)[-2:]
    assert configuration["kind"] == "MutatingWebhookConfiguration"
    assert configuration["metadata"]["name"] == "liqo-pod-mutator"
    (hook,) = configuration["webhooks"]
    assert hook == {
        "name": "pods.offloading.liqo.io",
        "clientConfig": {"service": {"namespace": "liqo", "name": "liqo-webhook", "path": "/mutate/pods", "port": 443}},
        "rules": [
            {
                "operations": ["CREATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["pods"],
                "scope": "Namespaced",
            }
        ],
        "namespaceSelector": {"matchLabels": {"liqo.io/scheduling-enabled": "true"}},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
        "reinvocationPolicy": "Never",
    }
    assert validator["kind"] == "ValidatingWebhookConfiguration"
    assert validator["metadata"]["name"] == "liqo-shadowpod-validator"
    (check,) = validator["webhooks"]
    assert check == {
        "name": "shadowpods.offloading.liqo.io",
        "clientConfig": {
            "service": {"namespace": "liqo", "name": "liqo-webhook", "path": "/validate/shadowpods", "port": 443}
        },
        "rules": [
            {
                "operations": ["CREATE", "UPDATE"],
                "apiGroups": ["virtualkubelet.liqo.io"],
                "apiVersions": ["*"],
                "resources": ["shadowpods"],
                "scope": "Namespaced",
            }
        ],
        "namespaceSelector": {
            "matchExpressions": [
                {"key": "liqo.io/remote-cluster-id", "operator": "Exists"},
                {"key": "liqo.io/origin-namespace", "operator": "Exists"},
            ]
        },
        "matchConditions": [{"name": "judged-fields-change", "expression": manifests.SHADOW_POD_JUDGED_CHANGE}],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 5,
    }


def test_the_webhook_service_is_cluster_internal_and_not_the_peers_one() -> None:
    services = {m["metadata"]["name"]: m for m in install_manifests() if m["kind"] == "Service"}
    assert services["liqo-webhook"]["spec"]["type"] == "ClusterIP"
    assert services["liqo-webhook"]["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "webhook"}]
    assert services["liqo-auth"]["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "auth"}]


def test_a_local_cluster_registers_the_loopback_url_and_its_ca() -> None:
    def config(path: str) -> Obj:
        return manifests.webhook_url_client_config(webhook_url="https://127.0.0.1:40123/", ca_pem=b"CA", path=path)

    mutator, validator = install_manifests(webhook_client_config=config, placement_policy=False)[-2:]
    bundle = base64.b64encode(b"CA").decode()
    assert mutator["webhooks"][0]["clientConfig"] == {"url": "https://127.0.0.1:40123/mutate/pods", "caBundle": bundle}
    assert validator["webhooks"][0]["clientConfig"] == {
        "url": "https://127.0.0.1:40123/validate/shadowpods",
        "caBundle": bundle,
    }


def test_the_manager_may_read_and_patch_its_own_webhook_configurations_only() -> None:
    rules = [r for r in manifests.manager_rules() if "admissionregistration.k8s.io" in r["apiGroups"]]
    assert {(tuple(r["resources"]), tuple(r["resourceNames"])) for r in rules} == {
        (("mutatingwebhookconfigurations",), ("liqo-pod-mutator",)),
        (("validatingwebhookconfigurations",), ("liqo-shadowpod-validator",)),
    }
    assert all(sorted(r["verbs"]) == ["get", "patch"] for r in rules)


def configuration(client_config: Obj, name: str = registration.WEBHOOK_NAME) -> Obj:
    return {"webhooks": [{"name": name, "clientConfig": client_config}]}


def test_the_ca_bundle_is_published_for_a_service_webhook_only_when_it_differs() -> None:
    service = {"service": {"namespace": "liqo", "name": "liqo-auth"}}
    bundle = base64.b64encode(b"CA PEM").decode()
    assert registration.ca_bundle_patch(configuration(service), ca_pem="CA PEM") == {
        "webhooks": [{"name": registration.WEBHOOK_NAME, "clientConfig": {"caBundle": bundle}}]
    }
    assert registration.ca_bundle_patch(configuration(service | {"caBundle": bundle}), ca_pem="CA PEM") is None
    assert (
        registration.ca_bundle_patch(configuration({"url": "https://x", "caBundle": bundle}), ca_pem="CA PEM") is None
    )
    assert registration.ca_bundle_patch(configuration({"url": "https://x"}), ca_pem="CA PEM") is not None
    assert registration.ca_bundle_patch(configuration(service, name="other"), ca_pem="x") is None


DNS = registration.service_dns_names(service="liqo-auth", namespace="liqo")
NOW = datetime.datetime.now(datetime.UTC)


def test_the_service_names_include_the_one_the_api_server_calls() -> None:
    assert "liqo-auth.liqo.svc" in DNS


def test_a_fresh_pair_is_usable_and_survives_its_secret() -> None:
    pair = registration.new_pair(dns_names=DNS, now=NOW)
    assert registration.usable(pair, dns_names=DNS, now=NOW)
    secret = registration.serving_secret(pair, namespace="liqo", labels={"a": "b"})
    assert secret["type"] == "kubernetes.io/tls"
    assert registration.pair_from_secret(secret) == pair
    assert registration.pair_from_secret({"data": {"tls.crt": "x"}}) is None


def test_a_pair_near_expiry_or_for_other_names_is_replaced() -> None:
    pair = registration.new_pair(dns_names=DNS, now=NOW)
    assert not registration.usable(pair, dns_names=DNS, now=NOW + datetime.timedelta(days=340))
    assert not registration.usable(pair, dns_names=[*DNS, "other.liqo.svc"], now=NOW)
    assert not registration.usable(registration.ServingPair("junk", "junk", "junk"), dns_names=DNS, now=NOW)
