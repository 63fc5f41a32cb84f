"""Authentication against a real cluster: the handshake, what the identity may do, what a refusal leaves.

The provider's side runs as it does in the manager: the endpoint over HTTPS on loopback (a self-signed
certificate the consumer does not verify) and the real provisioner, acting with exactly the manager's
RBAC (``liqo-manager``'s rules, bound to a throw-away user), so a permission missing from the install
manifests fails here. The consumer's identity is then used as is, through our client and through kubectl.
Every refusal is checked for side effects on the real cluster: no namespace, ForeignCluster, pin or CSR.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime
import os
import re
import ssl
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import NameOID

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.identity import ClusterIdentity
from liqo.api.networks import ClusterNetwork
from liqo.api.provisioner import AuthenticatedConsumer, ProvisioningError
from liqo.api.resources import FOREIGN_CLUSTERS, NETWORK_CONFIGS, RESOURCE_OFFERS, RESOURCE_REQUESTS
from liqo.apps.manager import build_auth_endpoint
from liqo.install.manifests import manager_rules, peer_cluster_roles
from liqo.kube import pki
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, ConflictError, NotFoundError
from liqo.kube.events import EventRecorder
from liqo.kube.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CSRS,
    DEPLOYMENTS,
    NAMESPACES,
    POD_TEMPLATES,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
    SERVICES,
    Resource,
)
from liqo.network import gateway_objects
from liqo.network.configs import NetworkConfigs
from liqo.network.links import Role, our_word
from liqo.peering import authclient, enrolment, tokens
from liqo.peering.authcaches import AuthCaches
from liqo.peering.authprotocol import make_csr
from liqo.peering.authserver import RateLimit
from liqo.peering.enrolment import TenantLimits, TokenCollector
from liqo.peering.incoming import REQUESTED, IncomingPeering
from liqo.peering.provisioning import KubeProvisioner
from tests.integration.helpers import LocalCluster, signed_identity_request, stopped, unique
from tests.shared import eventually

TTL = 900
RBAC = "rbac.authorization.k8s.io"
PROVIDER_KEY = ClusterKey.generate()
PROVIDER_NETWORK = ClusterNetwork.parse(pod_cidr="10.245.0.0/16", service_cidr="10.97.0.0/16")
CONSUMER_NETWORK = ClusterNetwork.parse(pod_cidr="10.246.0.0/16", service_cidr="10.98.0.0/16")
KEYS: dict[str, ClusterKey] = {}
"""Each consumer's cluster key, made on first use."""


def key_of(consumer: str) -> ClusterKey:
    return KEYS.setdefault(consumer, ClusterKey.generate())


@dataclass
class Provider:
    cluster_id: str
    auth_url: str
    admin: KubeClient
    caches: AuthCaches
    """What the endpoint knows of consumers: a test that wrote behind its back waits until it shows."""
    minted: list[str] = field(default_factory=list)

    async def mint(self, *, valid_for: datetime.timedelta = datetime.timedelta(hours=1)) -> str:
        """A token as `liqoctl generate peer-command` mints it (for one consumer, once)."""
        token, recorded = await enrolment.mint(self.admin, valid_for=valid_for)
        self.minted.append(recorded.id)
        return token


class Fresh:
    """A handshake's token: one minted for it."""


FRESH = Fresh()


class ListCounting(KubeClient):
    """A client counting the lists it sends, by resource: whose a list was, which the API server cannot say."""

    def __init__(self, **client: Any) -> None:
        super().__init__(**client)
        self.lists: collections.Counter[str] = collections.Counter()

    async def list(self, resource: Resource, **query: Any) -> dict[str, Any]:
        self.lists[resource.plural] += 1
        return await super().list(resource, **query)


@pytest.fixture
async def as_manager(cluster: LocalCluster, kube: KubeClient) -> AsyncIterator[KubeClient]:
    """A client with exactly the manager's cluster-wide permissions, and the peer ClusterRoles it binds."""
    for role in peer_cluster_roles():  # as install puts them (idempotent; like the CRDs, left in place)
        await kube.apply(CLUSTER_ROLES, role)
    user = unique("liqo-manager-test")
    await kube.create(
        CLUSTER_ROLES,
        {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": user}, "rules": manager_rules()},
    )
    await kube.create(
        CLUSTER_ROLE_BINDINGS,
        {
            "apiVersion": f"{RBAC}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": user},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": user},
            "subjects": [{"apiGroup": RBAC, "kind": "User", "name": user}],
        },
    )
    ca = pki.KeyPair((cluster.dir.pki / "ca.crt").read_bytes(), (cluster.dir.pki / "ca.key").read_bytes())
    leaf = pki.issue(ca, common_name=user, client=True)
    config = pki.kubeconfig(cluster="c", server=kube.server, ca=ca.cert, user=user, cert=leaf.cert, key=leaf.key)
    try:
        async with ListCounting.from_kubeconfig_dict(config, name="manager") as client:
            yield client
    finally:
        await kube.delete(CLUSTER_ROLE_BINDINGS, user)
        await kube.delete(CLUSTER_ROLES, user)


@pytest.fixture
async def liqo_namespace(kube: KubeClient) -> None:
    """Namespace ``liqo``, where tokens live. Kept once made: deleting it, the next test would find it terminating."""
    with contextlib.suppress(ConflictError):
        await kube.create(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": names.LIQO_NAMESPACE}}
        )


@contextlib.asynccontextmanager
async def auth_endpoint(
    kube: KubeClient, as_manager: KubeClient, tmp_path: Path, *, limits: TenantLimits | None = None
) -> AsyncIterator[Provider]:
    """The authentication endpoint of the session cluster over HTTPS on loopback, as the manager serves it.

    Ready once its caches have listed (until then it answers "retry later").
    """
    provider_id = str(uuid.uuid4())
    tls = pki.issue(pki.make_ca("auth-ca"), common_name="auth", ip_addresses=["127.0.0.1"], server=True)
    pki.write_private(tmp_path / "auth.pem", tls.cert + tls.key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "auth.pem")
    local = ClusterIdentity(
        cluster_id=provider_id,
        cluster_name="provider",
        api_server_url=kube.server,
        auth_url="",
        cluster_labels={},
    )
    endpoint = build_auth_endpoint(
        as_manager,
        local=local,
        network=PROVIDER_NETWORK,
        key=PROVIDER_KEY,
        ca_pem=kube.access.ca_pem or "",
        identity_ttl=TTL,
        limits=limits or TenantLimits(),
        rate_limit=RateLimit(),
    )
    runner = web.AppRunner(endpoint.app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    auth_provider = Provider(provider_id, f"https://127.0.0.1:{runner.addresses[0][1]}", kube, endpoint.caches)

    try:
        assert await endpoint.informers.wait_synced(30), "the endpoint's caches have listed"
        yield auth_provider
    finally:
        await runner.cleanup()
        for token in auth_provider.minted:
            with contextlib.suppress(NotFoundError):
                await kube.delete(SECRETS, tokens.secret_name(token), namespace=names.LIQO_NAMESPACE)


@pytest.fixture
async def auth_provider(
    kube: KubeClient, as_manager: KubeClient, crds: None, liqo_namespace: None, tmp_path: Path
) -> AsyncIterator[Provider]:
    """The authentication endpoint of the session cluster, with the default caps."""
    async with auth_endpoint(kube, as_manager, tmp_path) as endpoint:
        yield endpoint


@pytest.fixture
async def consumer_id(kube: KubeClient) -> AsyncIterator[str]:
    """A fresh consumer ID; whatever the provider made for it is deleted afterwards."""
    consumer = str(uuid.uuid4())
    yield consumer
    await forget(kube, consumer)


async def forget(kube: KubeClient, consumer: str) -> None:
    """Delete whatever the provider made for ``consumer``."""
    with contextlib.suppress(NotFoundError):
        await kube.delete(NAMESPACES, names.tenant_namespace(consumer))
    for fc in await foreign_clusters_of(kube, consumer):
        await kube.delete(FOREIGN_CLUSTERS, fc["metadata"]["name"])
    for csr in await csrs_of(kube, consumer):
        await kube.delete(CSRS, csr["metadata"]["name"])


async def foreign_clusters_of(kube: KubeClient, consumer: str) -> list[dict[str, Any]]:
    items, _ = await kube.list_all(FOREIGN_CLUSTERS)
    return [fc for fc in items if fc["spec"].get("clusterID") == consumer]


async def csrs_of(kube: KubeClient, consumer: str) -> list[dict[str, Any]]:
    items, _ = await kube.list_all(CSRS, label_selector=f"{names.REMOTE_CLUSTER_ID}={consumer}")
    return items


async def handshake(
    auth_provider: Provider, consumer: str, *, token: str | Fresh | None = FRESH, key: ClusterKey | None = None
) -> authclient.Identity:
    """``consumer``'s handshake, with its own key (or ``key``) and ``token`` (by default one minted for it)."""
    return await authclient.request_identity(
        auth_url=auth_provider.auth_url,
        key=key or key_of(consumer),
        token=await auth_provider.mint() if isinstance(token, Fresh) else token,
        consumer_id=consumer,
        consumer_name=f"consumer-{consumer[:8]}",
        consumer_network=CONSUMER_NETWORK,
        consumer_auth_url="https://consumer.example:8443",
        expected_provider_id=auth_provider.cluster_id,
        expected_fingerprint=PROVIDER_KEY.fingerprint,
    )


async def leftovers(kube: KubeClient, consumer: str) -> list[str]:
    """What exists on the provider for ``consumer``: its tenant namespace, ForeignClusters and CSRs."""
    found = [f"ForeignCluster {fc['metadata']['name']}" for fc in await foreign_clusters_of(kube, consumer)]
    found += [f"CSR {csr['metadata']['name']}" for csr in await csrs_of(kube, consumer)]
    with contextlib.suppress(NotFoundError):
        tenant_ns = await kube.get(NAMESPACES, names.tenant_namespace(consumer))
        if not tenant_ns["metadata"].get("deletionTimestamp"):
            found.append(f"Namespace {tenant_ns['metadata']['name']}")
    return found


async def allowed(client: KubeClient, **attributes: str) -> bool:
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": attributes},
    }
    answer = await client.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=review)
    return bool(answer["status"].get("allowed"))


async def forbidden(call: Awaitable[Any]) -> bool:
    try:
        await call
    except ApiError as exc:
        return exc.status == 403
    return False


def resource_request(namespace: str, consumer: str) -> dict[str, Any]:
    return {
        "apiVersion": RESOURCE_REQUESTS.api_version,
        "kind": RESOURCE_REQUESTS.kind,
        "metadata": {"name": consumer, "namespace": namespace},
        "spec": {"consumerClusterID": consumer, "consumerClusterName": "consumer"},
    }


async def test_a_consumer_gets_a_short_lived_identity_confined_to_its_tenant_namespace(
    kube: KubeClient, auth_provider: Provider, consumer_id: str, namespace: str
) -> None:
    before = datetime.datetime.now(datetime.UTC)
    identity = await handshake(auth_provider, consumer_id)
    tenant = names.tenant_namespace(consumer_id)
    assert identity.provider_id == auth_provider.cluster_id
    assert identity.namespace == tenant
    assert identity.api_server_url == kube.server

    cert = x509.load_pem_x509_certificate(identity.cert_pem.encode())
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME) == []
    assert cert.subject.rfc4514_string() == f"CN={names.peer_user(consumer_id)}"
    assert identity.expires_at == cert.not_valid_after_utc
    lifetime = (cert.not_valid_after_utc - before).total_seconds()
    assert TTL - 60 < lifetime <= TTL + 5

    tenant_ns = await kube.get(NAMESPACES, tenant)
    assert (
        tenant_ns["metadata"]["labels"] | names.peer_labels(consumer_id) | {names.TENANT: "true"}
        == tenant_ns["metadata"]["labels"]
    )
    binding = await kube.get(ROLE_BINDINGS, "liqo-peer", namespace=tenant)
    assert binding["metadata"]["labels"] == names.peer_labels(consumer_id)
    assert binding["roleRef"] == {"apiGroup": RBAC, "kind": "ClusterRole", "name": names.PEER_TENANT_ROLE}
    assert (await kube.list_all(ROLES, namespace=tenant))[0] == []  # no Role: the manager may not write any
    [fc] = await foreign_clusters_of(kube, consumer_id)
    assert fc["spec"] == {
        "clusterID": consumer_id,
        "clusterName": f"consumer-{consumer_id[:8]}",
        "authURL": "https://consumer.example:8443",
        "incomingPeeringEnabled": "Auto",
        "outgoingPeeringEnabled": "No",
        "keyFingerprint": key_of(consumer_id).fingerprint,
        "network": {"podCIDR": "10.246.0.0/16", "serviceCIDR": "10.98.0.0/16"},  # as the consumer told it
    }
    assert identity.provider_network == PROVIDER_NETWORK
    assert await csrs_of(kube, consumer_id) == []

    async with KubeClient.from_kubeconfig_dict(identity.kubeconfig(), name="peer") as peer:
        created = await peer.create(RESOURCE_REQUESTS, resource_request(tenant, consumer_id))
        await peer.patch(RESOURCE_REQUESTS, consumer_id, {"spec": {"consumerClusterName": "renamed"}}, namespace=tenant)
        [listed] = (await peer.list(RESOURCE_REQUESTS, namespace=tenant))["items"]
        assert (listed["metadata"]["uid"], listed["spec"]["consumerClusterName"]) == (
            created["metadata"]["uid"],
            "renamed",
        )
        assert (await peer.list(RESOURCE_OFFERS, namespace=tenant))["items"] == []
        await peer.delete(RESOURCE_REQUESTS, consumer_id, namespace=tenant)

        assert await forbidden(peer.create(RESOURCE_REQUESTS, resource_request(namespace, consumer_id)))
        offer: dict[str, Any] = {"apiVersion": RESOURCE_OFFERS.api_version, "kind": RESOURCE_OFFERS.kind}
        offer |= {"metadata": {"name": "x", "namespace": tenant}, "spec": {"providerClusterID": "x"}}
        assert await forbidden(peer.create(RESOURCE_OFFERS, offer))
        assert await forbidden(peer.list(NAMESPACES))
        assert await forbidden(peer.get(SECRETS, "anything", namespace="kube-system"))
        assert await forbidden(peer.list(SECRETS, namespace=tenant))
        assert await forbidden(peer.list(FOREIGN_CLUSTERS))

        for verb in ("get", "list", "watch", "create", "update", "patch", "delete"):
            assert await allowed(
                peer, namespace=tenant, verb=verb, group="discovery.liqo.io", resource="resourcerequests"
            )
        assert await allowed(
            peer,
            namespace=tenant,
            verb="get",
            group="discovery.liqo.io",
            resource="resourcerequests",
            subresource="status",
        )
        assert not await allowed(
            peer,
            namespace=tenant,
            verb="update",
            group="discovery.liqo.io",
            resource="resourcerequests",
            subresource="status",
        )
        for verb in ("get", "list", "watch"):
            assert await allowed(peer, namespace=tenant, verb=verb, group="sharing.liqo.io", resource="resourceoffers")
        for verb in ("create", "update", "patch", "delete"):
            assert not await allowed(
                peer, namespace=tenant, verb=verb, group="sharing.liqo.io", resource="resourceoffers"
            )
        for verb in ("get", "update", "patch"):
            assert await allowed(
                peer,
                namespace=tenant,
                verb=verb,
                group="sharing.liqo.io",
                resource="resourceoffers",
                subresource="status",
            )
        assert not await allowed(peer, namespace="kube-system", verb="get", resource="secrets")
        assert not await allowed(peer, verb="list", resource="namespaces")
        assert not await allowed(
            peer, namespace=namespace, verb="create", group="discovery.liqo.io", resource="resourcerequests"
        )


async def test_kubectl_as_the_identity_sees_only_the_role_and_the_defaults(
    cluster: LocalCluster, auth_provider: Provider, consumer_id: str, tmp_path: Path
) -> None:
    identity = await handshake(auth_provider, consumer_id)
    config = tmp_path / "identity.kubeconfig"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(identity.kubeconfig(), handle)
    command = [cluster.kubectl()[0], f"--kubeconfig={config}", f"--cache-dir={tmp_path / 'cache'}"]
    command += ["auth", "can-i", "--list", "-n", identity.namespace]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr

    rules: dict[str, set[str]] = {}
    named: dict[str, tuple[str, set[str]]] = {}
    non_resource_verbs: set[str] = set()
    for line in done.stdout.splitlines()[1:]:
        *_, resource_names, verbs_text = re.findall(r"\[([^\]]*)\]", line)
        verbs = set(verbs_text.split())
        if line.startswith(" "):  # a non-resource URL rule
            non_resource_verbs |= verbs
        elif resource_names:
            named[line.split()[0]] = (resource_names, verbs)
        else:
            rules[line.split()[0]] = verbs
    defaults = {
        f"{review}.{group}": {"create"}
        for review, group in (
            ("selfsubjectreviews", "authentication.k8s.io"),
            ("selfsubjectaccessreviews", "authorization.k8s.io"),
            ("selfsubjectrulesreviews", "authorization.k8s.io"),
        )
    }
    assert rules == defaults | {
        "resourcerequests.discovery.liqo.io": {"get", "list", "watch", "create", "update", "patch", "delete"},
        "resourcerequests.discovery.liqo.io/status": {"get"},
        "resourceoffers.sharing.liqo.io": {"get", "list", "watch"},
        "resourceoffers.sharing.liqo.io/status": {"get", "update", "patch"},
        "namespacemaps.offloading.liqo.io": {"get", "list", "watch", "create", "update", "patch", "delete"},
        "namespacemaps.offloading.liqo.io/status": {"get"},
        # Its network word; the policy liqo-peer-network-configs narrows writes to the one named after it.
        "networkconfigs.networking.liqo.io": {"get", "list", "watch", "create", "update", "patch", "delete"},
        "leases.coordination.k8s.io": {"create"},  # its heartbeat: a create cannot be limited by name
    }
    assert named == {"leases.coordination.k8s.io": (names.CONSUMER_HEARTBEAT, {"get", "update", "patch"})}
    assert non_resource_verbs == {"get"}


async def test_a_wrong_token_is_refused_and_creates_nothing(
    kube: KubeClient, auth_provider: Provider, consumer_id: str
) -> None:
    for token in ("not-the-token", None):
        with pytest.raises(authclient.AuthRejected) as caught:
            await handshake(auth_provider, consumer_id, token=token)
        assert caught.value.status == 401
    assert await leftovers(kube, consumer_id) == []


async def test_a_handshake_lists_nothing_on_the_api_server(
    as_manager: KubeClient, auth_provider: Provider, consumer_id: str
) -> None:
    """Strangers, a wrong token, an enrolment and a renewal: the endpoint reads what it knows from its caches.

    Counted on the endpoint's own client (the manager's): the API server's count of lists
    (``apiserver_request_total``) is every client's, and the cluster's own controllers relist nodes now and
    then (a run saw four node lists land in the middle of this test).
    """
    assert isinstance(as_manager, ListCounting)
    before = collections.Counter(as_manager.lists)
    for _ in range(5):  # anyone: a key of its own, a fresh nonce, no token
        stranger = str(uuid.uuid4())
        status, answer = await signed_identity_request(
            auth_provider.auth_url, consumer=stranger, key=ClusterKey.generate(), token=None
        )
        assert (status, answer["reason"].split(",")[0]) == (401, "this cluster does not know your key")
    with pytest.raises(authclient.AuthRejected):
        await handshake(auth_provider, consumer_id, token="not-the-token")
    await handshake(auth_provider, consumer_id)  # enrols
    await handshake(auth_provider, consumer_id, token=None)  # renews with its key
    assert as_manager.lists == before, "the endpoint listed during handshakes"


MALFORMED_NETWORKS = {
    "missing": None,
    "not an object": "10.244.0.0/16",
    "host bits": {"podCIDR": "10.244.0.1/16", "serviceCIDR": "10.96.0.0/16"},
    "too wide": {"podCIDR": "0.0.0.0/1", "serviceCIDR": "10.96.0.0/16"},
    "cloud metadata": {"podCIDR": "10.244.0.0/16", "serviceCIDR": "169.254.169.254/32"},
    "loopback": {"podCIDR": "127.0.0.0/8", "serviceCIDR": "10.96.0.0/16"},
    "overlapping itself": {"podCIDR": "10.0.0.0/8", "serviceCIDR": "10.96.0.0/16"},
    "oversized": {"podCIDR": "1" * 4000, "serviceCIDR": "10.96.0.0/16"},
}


@pytest.mark.parametrize("network", MALFORMED_NETWORKS.values(), ids=MALFORMED_NETWORKS.keys())
async def test_a_malformed_network_is_refused_and_creates_nothing(
    kube: KubeClient, auth_provider: Provider, consumer_id: str, network: object
) -> None:
    """Signed with the consumer's own key and the token, as a hostile peer would send it: 400, nothing made."""
    status, answer = await signed_identity_request(
        auth_provider.auth_url,
        consumer=consumer_id,
        key=key_of(consumer_id),
        token=await auth_provider.mint(),
        network=network,
    )
    assert status == 400
    assert "'network" in answer["reason"]
    assert await leftovers(kube, consumer_id) == []


async def test_an_enrolled_consumer_sending_a_malformed_network_changes_nothing(
    kube: KubeClient, auth_provider: Provider, consumer_id: str
) -> None:
    await handshake(auth_provider, consumer_id)
    [before] = await foreign_clusters_of(kube, consumer_id)
    status, answer = await signed_identity_request(
        auth_provider.auth_url,
        consumer=consumer_id,
        key=key_of(consumer_id),
        token=None,
        network={"podCIDR": "127.0.0.0/8", "serviceCIDR": "10.96.0.0/16"},
    )
    assert (status, answer["reason"]) == (
        400,
        "'network.podCIDR': 127.0.0.0/8 overlaps the special-purpose range 127.0.0.0/8",
    )
    [after] = await foreign_clusters_of(kube, consumer_id)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"]["network"] == CONSUMER_NETWORK.to_message()
    assert await csrs_of(kube, consumer_id) == []


async def test_another_key_claiming_an_enrolled_consumers_id_is_refused_without_side_effects(
    kube: KubeClient, auth_provider: Provider, consumer_id: str
) -> None:
    """A token holder cannot become another consumer: the first to enrol a cluster ID pins its key."""
    genuine = await handshake(auth_provider, consumer_id)
    before = sorted(await leftovers(kube, consumer_id))
    [fc] = await foreign_clusters_of(kube, consumer_id)
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(auth_provider, consumer_id, key=ClusterKey.generate())
    assert caught.value.status == 403
    assert "another key is registered" in caught.value.reason
    assert sorted(await leftovers(kube, consumer_id)) == before
    [after] = await foreign_clusters_of(kube, consumer_id)
    assert after["metadata"]["resourceVersion"] == fc["metadata"]["resourceVersion"]
    async with KubeClient.from_kubeconfig_dict(genuine.kubeconfig(), name="genuine") as peer:
        await peer.list(RESOURCE_REQUESTS, namespace=genuine.namespace)  # the genuine identity still works


async def test_a_revoked_token_enrols_no_one_and_breaks_no_one_enrolled(
    kube: KubeClient, auth_provider: Provider, consumer_id: str
) -> None:
    enrolled_with = await auth_provider.mint()
    await handshake(auth_provider, consumer_id, token=enrolled_with)
    revoked = await auth_provider.mint()
    assert await enrolment.revoke(kube, [auth_provider.minted[-1]]) == [auth_provider.minted[-1]]
    renewed = await handshake(auth_provider, consumer_id, token=enrolled_with)  # it still holds its own: no matter
    assert renewed.namespace == names.tenant_namespace(consumer_id)
    newcomer = str(uuid.uuid4())
    try:
        with pytest.raises(authclient.AuthRejected, match=r"\(401\): unknown enrolment token"):
            await handshake(auth_provider, newcomer, token=revoked)
        assert await leftovers(kube, newcomer) == []
        await handshake(auth_provider, newcomer)  # a token of its own enrols it
    finally:
        await forget(kube, newcomer)


async def test_a_revoked_consumer_stays_refused_until_allowed_again(
    kube: KubeClient, auth_provider: Provider, consumer_id: str
) -> None:
    await handshake(auth_provider, consumer_id)
    [fc] = await foreign_clusters_of(kube, consumer_id)
    await kube.patch(FOREIGN_CLUSTERS, fc["metadata"]["name"], {"spec": {"incomingPeeringEnabled": "No"}})
    await kube.delete(NAMESPACES, names.tenant_namespace(consumer_id))  # what the manager's release does
    for token in (FRESH, None):
        with pytest.raises(authclient.AuthRejected) as caught:
            await handshake(auth_provider, consumer_id, token=token)
        assert caught.value.status == 403
        assert "does not accept cluster" in caught.value.reason
    assert await leftovers(kube, consumer_id) == [f"ForeignCluster {fc['metadata']['name']}"]
    await kube.patch(FOREIGN_CLUSTERS, fc["metadata"]["name"], {"spec": {"incomingPeeringEnabled": "Auto"}})

    async def namespace_gone() -> bool:
        try:
            await kube.get(NAMESPACES, names.tenant_namespace(consumer_id))
        except NotFoundError:
            return True
        return False

    await eventually(namespace_gone, timeout=60, message="the revoked tenant namespace is gone")
    allowed_again = await handshake(auth_provider, consumer_id)
    assert allowed_again.namespace == names.tenant_namespace(consumer_id)


async def test_a_failed_signature_leaves_nothing_behind(
    cluster: LocalCluster, kube: KubeClient, as_manager: KubeClient, crds: None
) -> None:
    """A provisioning that fails half-way (here: no certificate in time) takes back what it created.

    The signer (kube-controller-manager) is stopped, so that no certificate can come, however fast or
    slow the machine: a timeout alone races with a signer that answers first.
    """
    consumer = str(uuid.uuid4())
    records = AuthCaches(SharedInformers(as_manager), local_id=str(uuid.uuid4()))  # not run: it knows no one
    provisioner = KubeProvisioner(
        client=as_manager,
        records=records,
        api_server_url=kube.server,
        ca_pem="",
        identity_ttl=TTL,
        certificate_timeout=1,
    )
    async with stopped(cluster, "kube-controller-manager"):
        with pytest.raises(ProvisioningError, match="signed no certificate"):
            await provisioner.provision(
                AuthenticatedConsumer(
                    consumer_id=consumer,
                    consumer_name="doomed",
                    auth_url=None,
                    csr_pem=make_csr(consumer)[1],
                    key_fingerprint=key_of(consumer).fingerprint,
                    network=CONSUMER_NETWORK,
                )
            )
    assert await leftovers(kube, consumer) == []


async def test_renewal_reuses_everything_and_an_admins_foreign_cluster_is_left_alone(
    kube: KubeClient, auth_provider: Provider, consumer_id: str
) -> None:
    name = unique("admin-fc")
    spec = {"clusterID": consumer_id, "clusterName": "by-admin", "outgoingPeeringEnabled": "Yes"}
    await kube.create(
        FOREIGN_CLUSTERS,
        {
            "apiVersion": FOREIGN_CLUSTERS.api_version,
            "kind": FOREIGN_CLUSTERS.kind,
            "metadata": {"name": name},
            "spec": spec,
        },
    )

    async def seen() -> bool:  # the endpoint knows consumers from its caches: made this instant, it waits for them
        return auth_provider.caches.foreign_cluster(consumer_id) is not None

    await eventually(seen, timeout=30, message="the endpoint's cache holds the admin's ForeignCluster")
    first = await handshake(auth_provider, consumer_id)
    second = await handshake(auth_provider, consumer_id)
    assert first.cert_pem != second.cert_pem
    assert first.key_pem != second.key_pem
    [fc] = await foreign_clusters_of(kube, consumer_id)
    assert fc["metadata"]["name"] == name
    assert (fc["spec"]["clusterName"], fc["spec"]["outgoingPeeringEnabled"]) == ("by-admin", "Yes")
    assert fc["spec"]["keyFingerprint"] == key_of(consumer_id).fingerprint  # its empty pin filled in
    async with KubeClient.from_kubeconfig_dict(second.kubeconfig()) as peer:
        await peer.list(RESOURCE_REQUESTS, namespace=second.namespace)
    assert await csrs_of(kube, consumer_id) == []


async def test_a_tenant_whose_consumer_never_asks_for_resources_is_collected(
    kube: KubeClient, as_manager: KubeClient, auth_provider: Provider, consumer_id: str
) -> None:
    """A token holder could otherwise mint tenants at will: one that never sends a request goes away."""
    engaged_id = str(uuid.uuid4())
    await handshake(auth_provider, consumer_id)
    engaged = await handshake(auth_provider, engaged_id)
    try:
        async with KubeClient.from_kubeconfig_dict(engaged.kubeconfig(), name="engaged") as peer:
            await peer.create(RESOURCE_REQUESTS, resource_request(engaged.namespace, engaged_id))
        informers = SharedInformers(as_manager)
        incoming = IncomingPeering(
            client=as_manager, informers=informers, abandoned_after=datetime.timedelta(seconds=2)
        )
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(informers.run())]
            assert await informers.wait_synced(30)
            tasks.append(group.create_task(incoming.controller.run()))

            async def collected() -> bool:
                return await leftovers(kube, consumer_id) == []

            await eventually(collected, timeout=60, message="the idle consumer's tenant and record are gone")
            tenant = await kube.get(NAMESPACES, engaged.namespace)
            assert REQUESTED in tenant["metadata"]["annotations"]
            assert len(await foreign_clusters_of(kube, engaged_id)) == 1
            for task in tasks:
                task.cancel()
    finally:
        await forget(kube, engaged_id)


# -- bound enrolment: a token per consumer, caps on tenants, gateways for accepted peers only -----------------


async def outstanding_ids(kube: KubeClient) -> set[str]:
    return {token.id for token in await enrolment.outstanding(kube)}


async def test_one_token_enrols_one_cluster_even_when_two_race_for_it(
    kube: KubeClient, auth_provider: Provider
) -> None:
    """Two fresh cluster IDs, each with a key of its own, one token, at once: one identity, one refusal."""
    token = await auth_provider.mint()
    racers = [str(uuid.uuid4()), str(uuid.uuid4())]
    try:
        outcomes = await asyncio.gather(
            *(handshake(auth_provider, c, token=token) for c in racers), return_exceptions=True
        )
        [winner] = [racer for racer, got in zip(racers, outcomes, strict=True) if isinstance(got, authclient.Identity)]
        [refusal] = [got for got in outcomes if isinstance(got, authclient.AuthRejected)]
        assert (refusal.status, refusal.reason) == (401, tokens.UNKNOWN_TOKEN)
        [loser] = [racer for racer in racers if racer != winner]
        assert await leftovers(kube, loser) == []
        assert sorted(await leftovers(kube, winner)) == sorted(
            [f"ForeignCluster {fc['metadata']['name']}" for fc in await foreign_clusters_of(kube, winner)]
            + [f"Namespace {names.tenant_namespace(winner)}"]
        )
        assert auth_provider.minted[-1] not in await outstanding_ids(kube)  # used up
    finally:
        for racer in racers:
            await forget(kube, racer)


async def test_an_expired_token_is_refused_saying_when_and_is_collected(
    kube: KubeClient, as_manager: KubeClient, auth_provider: Provider, consumer_id: str
) -> None:
    def expired_token(ago: datetime.timedelta) -> tuple[str, dict[str, Any]]:
        token = tokens.new_token()
        fingerprint = tokens.enrolment_key(token).fingerprint
        auth_provider.minted.append(tokens.token_id(fingerprint))  # deleted after the test, collected or not
        expiry = datetime.datetime.now(datetime.UTC).replace(microsecond=0) - ago
        return token, tokens.token_secret(fingerprint=fingerprint, expires_at=expiry)

    token, secret = expired_token(datetime.timedelta(minutes=1))
    expired = auth_provider.minted[-1]
    await kube.create(SECRETS, secret)
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(auth_provider, consumer_id, token=token)
    assert caught.value.status == 401
    expiry = secret["metadata"]["annotations"][names.EXPIRES_AT]
    assert caught.value.reason.startswith(f"the enrolment token expired at {expiry}: ask"), caught.value.reason
    assert await leftovers(kube, consumer_id) == []
    assert expired in await outstanding_ids(kube)  # not used up either

    await auth_provider.mint()
    valid = auth_provider.minted[-1]
    informers = SharedInformers(as_manager)  # the manager's rights: it deletes tokens with them
    collector = TokenCollector(client=as_manager, informers=informers)
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(informers.run())]
        assert await informers.wait_synced(30)
        tasks.append(group.create_task(collector.controller.run()))

        async def gone(token_id: str) -> bool:
            return token_id not in await outstanding_ids(kube)

        await eventually(lambda: gone(expired), timeout=30, message="the expired token is collected")
        # One more expired after the first sync: once it is gone, the valid token (queued before it) was judged.
        _, later = expired_token(datetime.timedelta(seconds=1))
        await kube.create(SECRETS, later)
        await eventually(
            lambda: gone(auth_provider.minted[-1]), timeout=30, message="a later expired token is collected"
        )
        assert valid in await outstanding_ids(kube)
        for task in tasks:
            task.cancel()


def our_offer(auth_provider: Provider, consumer: str) -> dict[str, Any]:
    """The provider's offer to ``consumer`` (the offer controller's job, done by hand: no manager runs here)."""
    return {
        "apiVersion": RESOURCE_OFFERS.api_version,
        "kind": RESOURCE_OFFERS.kind,
        "metadata": {"name": auth_provider.cluster_id, "namespace": names.tenant_namespace(consumer)},
        "spec": {
            "providerClusterID": auth_provider.cluster_id,
            "providerClusterName": "provider",
            "resources": {"cpu": "1", "memory": "1Gi", "pods": 10},
            "expiry": "2030-01-01T00:00:00Z",
        },
    }


async def accept(identity: authclient.Identity, auth_provider: Provider) -> None:
    """The consumer accepts the provider's offer, with its own identity (its word: the phase)."""
    async with KubeClient.from_kubeconfig_dict(identity.kubeconfig(), name="peer") as peer:
        await peer.patch(
            RESOURCE_OFFERS,
            auth_provider.cluster_id,
            {"status": {"phase": "Accepted"}},
            namespace=identity.namespace,
            subresource="status",
        )


async def test_over_the_pending_cap_an_enrolment_is_refused_with_its_reason_and_nothing_is_made(
    kube: KubeClient, as_manager: KubeClient, crds: None, liqo_namespace: None, tmp_path: Path
) -> None:
    """With a token of its own, a consumer still waits while as many as the cap are enrolled and accept nothing."""

    async def settled() -> bool:  # earlier tests' tenants, released, still count until their namespace is gone
        tenants, _ = await kube.list_all(NAMESPACES, label_selector=f"{names.TENANT}=true")
        return not any(tenant["metadata"].get("deletionTimestamp") for tenant in tenants)

    await eventually(settled, timeout=60, message="no tenant namespace is being deleted")
    bindings, _ = await kube.list_all(ROLE_BINDINGS, field_selector=f"metadata.name={names.PEER_BINDING}")
    already = len(enrolment.occupancy(bindings=bindings, offers=[], local_id="none").tenants)  # earlier tests'
    limits = TenantLimits(max_tenants=already + 10, max_pending=already + 2)
    consumers = [str(uuid.uuid4()) for _ in range(3)]
    async with auth_endpoint(kube, as_manager, tmp_path, limits=limits) as auth_provider:
        try:
            first = await handshake(auth_provider, consumers[0])
            await handshake(auth_provider, consumers[1])
            token = await auth_provider.mint()
            with pytest.raises(authclient.AuthRejected) as caught:
                await handshake(auth_provider, consumers[2], token=token)
            assert caught.value.status == 429
            assert (
                f"this cluster has {already + 2} consumer(s) enrolled that have not accepted an offer yet, the most"
                f" it takes ({limits.max_pending}): retry once one of them has accepted or left" in caught.value.reason
            ), caught.value.reason
            assert await leftovers(kube, consumers[2]) == []
            assert auth_provider.minted[-1] in await outstanding_ids(kube)  # not used up: it enrols once there is room
            # One of them accepts our offer: room for one more, and the same token enrols the third.
            await kube.create(RESOURCE_OFFERS, our_offer(auth_provider, consumers[0]))
            await accept(first, auth_provider)

            async def accepted() -> bool:  # counted from the endpoint's caches: once their watch brings it
                offer = auth_provider.caches.offers.store.get(
                    f"{names.tenant_namespace(consumers[0])}/{auth_provider.cluster_id}"
                )
                return offer is not None and (offer.get("status") or {}).get("phase") == "Accepted"

            await eventually(accepted, timeout=30, message="the endpoint's cache holds the accepted offer")
            third = await handshake(auth_provider, consumers[2], token=token)
            assert third.namespace == names.tenant_namespace(consumers[2])
        finally:
            for consumer in consumers:
                await forget(kube, consumer)


GATEWAY_TEMPLATE = {
    "apiVersion": "v1",
    "kind": "PodTemplate",
    "metadata": {"name": gateway_objects.GATEWAY_TEMPLATE, "namespace": names.LIQO_NAMESPACE},
    "template": {
        "spec": {"containers": [{"name": gateway_objects.CONTAINER, "image": "registry.invalid/liqo:gateway"}]}
    },
}


async def gateway_of(kube: KubeClient, consumer: str) -> list[str]:
    """The gateway objects this cluster runs for ``consumer``: its Deployment and its node port Service."""
    found = []
    for resource in (DEPLOYMENTS, SERVICES):
        with contextlib.suppress(NotFoundError):
            await kube.get(resource, gateway_objects.gateway_name(consumer), namespace=names.LIQO_NAMESPACE)
            found.append(resource.kind)
    return found


async def test_a_tenant_that_has_not_accepted_an_offer_gets_no_gateway(
    kube: KubeClient, auth_provider: Provider, consumer_id: str
) -> None:
    """Enrolled, asking for resources, its network word written: still no Deployment, no node port, until it accepts.

    The network fabric's controller runs here as the manager runs it (with the admin's rights: its own are
    install/test_manager_rights.py's), once an install's gateway template exists. Evidence that it judged the
    tenant: a peer made after it started, which accepts, gets its gateway (one worker, a FIFO queue: the tenant
    was judged before).
    """
    accepted_id = str(uuid.uuid4())
    identities: dict[str, authclient.Identity] = {}

    async def tenant_asking(consumer: str) -> None:
        identities[consumer] = identity = await handshake(auth_provider, consumer)
        await kube.create(RESOURCE_OFFERS, our_offer(auth_provider, consumer))
        async with KubeClient.from_kubeconfig_dict(identity.kubeconfig(), name="peer") as peer:
            await peer.create(RESOURCE_REQUESTS, resource_request(identity.namespace, consumer))
            word = our_word(
                local_id=consumer,
                peer_id=consumer,
                pod_cidr=CONSUMER_NETWORK.pod_cidr,
                remapped_pod_cidr=PROVIDER_NETWORK.pod_cidr,
                gateway_role=Role.CLIENT,
                public_key=None,
                endpoint=None,
            )
            await peer.create(NETWORK_CONFIGS, word)

    await tenant_asking(consumer_id)
    await kube.create(POD_TEMPLATES, GATEWAY_TEMPLATE)
    try:
        informers = SharedInformers(kube)
        configs = NetworkConfigs(
            client=kube,
            informers=informers,
            local_id=auth_provider.cluster_id,
            network=PROVIDER_NETWORK,
            events=EventRecorder(client=kube, component="test-network-configs"),
        )
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(informers.run())]
            assert await informers.wait_synced(30)
            tasks.append(group.create_task(configs.controller.run()))

            async def has_gateway(consumer: str) -> bool:
                return await gateway_of(kube, consumer) == ["Deployment", "Service"]

            await tenant_asking(accepted_id)
            await accept(identities[accepted_id], auth_provider)
            await eventually(lambda: has_gateway(accepted_id), timeout=30, message="the accepted peer's gateway")
            assert await gateway_of(kube, consumer_id) == []
            # It accepts: its gateway follows, so acceptance was all it lacked.
            await accept(identities[consumer_id], auth_provider)
            await eventually(lambda: has_gateway(consumer_id), timeout=30, message="a gateway once it accepts")
            for task in tasks:
                task.cancel()
    finally:
        await kube.delete(POD_TEMPLATES, gateway_objects.GATEWAY_TEMPLATE, namespace=names.LIQO_NAMESPACE)
        for consumer in (consumer_id, accepted_id):
            for resource in (DEPLOYMENTS, SERVICES, SECRETS):
                with contextlib.suppress(NotFoundError):
                    await kube.delete(resource, gateway_objects.gateway_name(consumer), namespace=names.LIQO_NAMESPACE)
        await forget(kube, accepted_id)
