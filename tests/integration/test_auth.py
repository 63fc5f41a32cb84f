"""Authentication against a real cluster: the handshake, what the identity may do, what a refusal leaves.

The provider's side runs as it does in the manager: the endpoint over HTTPS on loopback (a self-signed
certificate the consumer does not verify) and the real provisioner, acting with exactly the manager's
RBAC (``liqo-manager``'s rules, bound to a throw-away user), so a permission missing from the install
manifests fails here. The consumer's identity is then used as is, through our client and through kubectl.
Every refusal is checked for side effects on the real cluster: no namespace, ForeignCluster, pin or CSR.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import re
import ssl
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.x509.oid import NameOID

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.networks import ClusterNetwork
from liqo.api.provisioner import ProvisioningError
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS, RESOURCE_REQUESTS
from liqo.install.manifests import manager_rules, peer_cluster_roles
from liqo.kube import pki
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.resources import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    CSRS,
    NAMESPACES,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
)
from liqo.peering import authclient
from liqo.peering.authprotocol import NonceStore, make_csr
from liqo.peering.authserver import auth_app
from liqo.peering.incoming import REQUESTED, IncomingPeering
from liqo.peering.provisioning import KubeProvisioner
from tests.helpers import LocalCluster, eventually, signed_identity_request, stopped, unique

TOKEN = "aW50ZWdyYXRpb24tdG9rZW4tb2YtMzItYnl0ZXMtLS0"
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
    token: list[str]
    provisioner: KubeProvisioner


@pytest.fixture
async def manager(cluster: LocalCluster, kube: KubeClient) -> AsyncIterator[KubeClient]:
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
        async with KubeClient.from_kubeconfig_dict(config, name="manager") as client:
            yield client
    finally:
        await kube.delete(CLUSTER_ROLE_BINDINGS, user)
        await kube.delete(CLUSTER_ROLES, user)


@pytest.fixture
async def provider(kube: KubeClient, manager: KubeClient, crds: None, tmp_path: Path) -> AsyncIterator[Provider]:
    """The authentication endpoint of the session cluster, over HTTPS on loopback."""
    provider_id = str(uuid.uuid4())
    tls = pki.issue(pki.make_ca("auth-ca"), common_name="auth", ip_addresses=["127.0.0.1"], server=True)
    pki.write_private(tmp_path / "auth.pem", tls.cert + tls.key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "auth.pem")
    provisioner = KubeProvisioner(
        client=manager, api_server_url=kube.server, ca_pem=kube.access.ca_pem or "", identity_ttl=TTL
    )
    token = [TOKEN]

    async def token_source() -> str:
        return token[0]

    app = auth_app(
        cluster_id=provider_id,
        cluster_name="provider",
        key=PROVIDER_KEY,
        network=PROVIDER_NETWORK,
        token_source=token_source,
        provisioner=provisioner,
        nonces=NonceStore(),
    )
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    try:
        yield Provider(provider_id, f"https://127.0.0.1:{runner.addresses[0][1]}", token, provisioner)
    finally:
        await runner.cleanup()


@pytest.fixture
async def consumer_id(kube: KubeClient) -> AsyncIterator[str]:
    """A fresh consumer ID; whatever the provider made for it is deleted afterwards."""
    consumer = str(uuid.uuid4())
    yield consumer
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
    provider: Provider, consumer: str, *, token: str | None = TOKEN, key: ClusterKey | None = None
) -> authclient.Identity:
    return await authclient.request_identity(
        auth_url=provider.auth_url,
        key=key or key_of(consumer),
        token=token,
        consumer_id=consumer,
        consumer_name=f"consumer-{consumer[:8]}",
        consumer_network=CONSUMER_NETWORK,
        consumer_auth_url="https://consumer.example:8443",
        expected_provider_id=provider.cluster_id,
        expected_fingerprint=PROVIDER_KEY.fingerprint,
    )


async def leftovers(kube: KubeClient, consumer: str) -> list[str]:
    """What exists on the provider for ``consumer``: its tenant namespace, ForeignClusters and CSRs."""
    found = [f"ForeignCluster {fc['metadata']['name']}" for fc in await foreign_clusters_of(kube, consumer)]
    found += [f"CSR {csr['metadata']['name']}" for csr in await csrs_of(kube, consumer)]
    with contextlib.suppress(NotFoundError):
        namespace = await kube.get(NAMESPACES, names.tenant_namespace(consumer))
        if not namespace["metadata"].get("deletionTimestamp"):
            found.append(f"Namespace {namespace['metadata']['name']}")
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
    kube: KubeClient, provider: Provider, consumer_id: str, namespace: str
) -> None:
    before = datetime.datetime.now(datetime.UTC)
    identity = await handshake(provider, consumer_id)
    tenant = names.tenant_namespace(consumer_id)
    assert identity.provider_id == provider.cluster_id
    assert identity.namespace == tenant
    assert identity.api_server_url == kube.server

    cert = x509.load_pem_x509_certificate(identity.cert_pem.encode())
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME) == []
    assert cert.subject.rfc4514_string() == f"CN={names.peer_user(consumer_id)}"
    assert identity.expires_at == cert.not_valid_after_utc
    lifetime = (cert.not_valid_after_utc - before).total_seconds()
    assert TTL - 60 < lifetime <= TTL + 5

    ns = await kube.get(NAMESPACES, tenant)
    assert (
        ns["metadata"]["labels"] | names.peer_labels(consumer_id) | {names.TENANT: "true"} == ns["metadata"]["labels"]
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
    cluster: LocalCluster, provider: Provider, consumer_id: str, tmp_path: Path
) -> None:
    identity = await handshake(provider, consumer_id)
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
    kube: KubeClient, provider: Provider, consumer_id: str
) -> None:
    for token in ("not-the-token", None):
        with pytest.raises(authclient.AuthRejected) as caught:
            await handshake(provider, consumer_id, token=token)
        assert caught.value.status == 401
    assert await leftovers(kube, consumer_id) == []


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
    kube: KubeClient, provider: Provider, consumer_id: str, network: object
) -> None:
    """Signed with the consumer's own key and the token, as a hostile peer would send it: 400, nothing made."""
    status, answer = await signed_identity_request(
        provider.auth_url, consumer=consumer_id, key=key_of(consumer_id), token=TOKEN, network=network
    )
    assert status == 400
    assert "'network" in answer["reason"]
    assert await leftovers(kube, consumer_id) == []


async def test_an_enrolled_consumer_sending_a_malformed_network_changes_nothing(
    kube: KubeClient, provider: Provider, consumer_id: str
) -> None:
    await handshake(provider, consumer_id)
    [before] = await foreign_clusters_of(kube, consumer_id)
    status, answer = await signed_identity_request(
        provider.auth_url,
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
    kube: KubeClient, provider: Provider, consumer_id: str
) -> None:
    """A token holder cannot become another consumer: the first to enrol a cluster ID pins its key."""
    genuine = await handshake(provider, consumer_id)
    before = sorted(await leftovers(kube, consumer_id))
    [fc] = await foreign_clusters_of(kube, consumer_id)
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(provider, consumer_id, key=ClusterKey.generate())
    assert caught.value.status == 403
    assert "another key is registered" in caught.value.reason
    assert sorted(await leftovers(kube, consumer_id)) == before
    [after] = await foreign_clusters_of(kube, consumer_id)
    assert after["metadata"]["resourceVersion"] == fc["metadata"]["resourceVersion"]
    async with KubeClient.from_kubeconfig_dict(genuine.kubeconfig(), name="genuine") as peer:
        await peer.list(RESOURCE_REQUESTS, namespace=genuine.namespace)  # the genuine identity still works


async def test_a_rotated_token_enrols_no_one_new_and_breaks_no_one_enrolled(
    kube: KubeClient, provider: Provider, consumer_id: str
) -> None:
    await handshake(provider, consumer_id)
    provider.token[0] = "a-fresh-token-minted-by-generate-peer-command"
    renewed = await handshake(provider, consumer_id, token=TOKEN)  # it still holds the old one: no matter
    assert renewed.namespace == names.tenant_namespace(consumer_id)
    newcomer = str(uuid.uuid4())
    try:
        with pytest.raises(authclient.AuthRejected, match=r"\(401\)"):
            await handshake(provider, newcomer, token=TOKEN)
        assert await leftovers(kube, newcomer) == []
        await handshake(provider, newcomer, token=provider.token[0])
    finally:
        with contextlib.suppress(NotFoundError):
            await kube.delete(NAMESPACES, names.tenant_namespace(newcomer))
        for fc in await foreign_clusters_of(kube, newcomer):
            await kube.delete(FOREIGN_CLUSTERS, fc["metadata"]["name"])


async def test_a_revoked_consumer_stays_refused_until_allowed_again(
    kube: KubeClient, provider: Provider, consumer_id: str
) -> None:
    await handshake(provider, consumer_id)
    [fc] = await foreign_clusters_of(kube, consumer_id)
    await kube.patch(FOREIGN_CLUSTERS, fc["metadata"]["name"], {"spec": {"incomingPeeringEnabled": "No"}})
    await kube.delete(NAMESPACES, names.tenant_namespace(consumer_id))  # what the manager's release does
    for token in (TOKEN, None):
        with pytest.raises(authclient.AuthRejected) as caught:
            await handshake(provider, consumer_id, token=token)
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
    allowed_again = await handshake(provider, consumer_id)
    assert allowed_again.namespace == names.tenant_namespace(consumer_id)


async def test_a_failed_signature_leaves_nothing_behind(
    cluster: LocalCluster, kube: KubeClient, manager: KubeClient, crds: None
) -> None:
    """A provisioning that fails half-way (here: no certificate in time) takes back what it created.

    The signer (kube-controller-manager) is stopped, so that no certificate can come, however fast or
    slow the machine: a timeout alone races with a signer that answers first.
    """
    consumer = str(uuid.uuid4())
    provisioner = KubeProvisioner(
        client=manager, api_server_url=kube.server, ca_pem="", identity_ttl=TTL, certificate_timeout=1
    )
    async with stopped(cluster, "kube-controller-manager"):
        with pytest.raises(ProvisioningError, match="signed no certificate"):
            await provisioner.provision(
                consumer_id=consumer,
                consumer_name="doomed",
                auth_url=None,
                csr_pem=make_csr(consumer)[1],
                key_fingerprint=key_of(consumer).fingerprint,
                network=CONSUMER_NETWORK,
            )
    assert await leftovers(kube, consumer) == []


async def test_renewal_reuses_everything_and_an_admins_foreign_cluster_is_left_alone(
    kube: KubeClient, provider: Provider, consumer_id: str
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
    first = await handshake(provider, consumer_id)
    second = await handshake(provider, consumer_id)
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
    kube: KubeClient, manager: KubeClient, provider: Provider, consumer_id: str
) -> None:
    """A token holder could otherwise mint tenants at will: one that never sends a request goes away."""
    engaged_id = str(uuid.uuid4())
    await handshake(provider, consumer_id)
    engaged = await handshake(provider, engaged_id)
    try:
        async with KubeClient.from_kubeconfig_dict(engaged.kubeconfig(), name="engaged") as peer:
            await peer.create(RESOURCE_REQUESTS, resource_request(engaged.namespace, engaged_id))
        informers = SharedInformers(manager)
        incoming = IncomingPeering(client=manager, informers=informers, abandoned_after=datetime.timedelta(seconds=2))
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
        with contextlib.suppress(NotFoundError):
            await kube.delete(NAMESPACES, names.tenant_namespace(engaged_id))
        for fc in await foreign_clusters_of(kube, engaged_id):
            await kube.delete(FOREIGN_CLUSTERS, fc["metadata"]["name"])
