"""The provider's manifests and CSR decisions, without a cluster."""

from __future__ import annotations

import asyncio
import base64
import copy
import datetime
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from liqo.api import names
from liqo.api.networks import ClusterNetwork
from liqo.api.provisioner import AuthenticatedConsumer, Issued, PeerDenied, PeerRecord, ProvisioningError, admission
from liqo.api.resources import FOREIGN_CLUSTERS
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, NotFoundError
from liqo.kube.kubeconfig import Access
from liqo.kube.resources import CSRS, NAMESPACES, Resource
from liqo.peering import records
from liqo.peering.authprotocol import make_csr
from liqo.peering.provisioning import (
    KubeProvisioner,
    consumer_foreign_cluster,
    csr_object,
    peer_role_binding,
    peer_rules,
    record_of,
)

PEER = "5a3c1b2e-0d4f-4a6b-9c8d-7e6f5a4b3c2d"
CSR = make_csr(PEER)[1]
KEY = "sha256:" + "a" * 64
OTHER_KEY = "sha256:" + "b" * 64
MANAGER = "liqo-manager"
NETWORK = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16")
MOVED = ClusterNetwork.parse(pod_cidr="10.40.0.0/16", service_cidr="10.96.0.0/16")


def test_the_peer_rules_allow_requests_namespace_maps_reading_offers_and_its_heartbeat_only() -> None:
    rules = peer_rules()
    granted = {
        (group, resource, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    requests = {("discovery.liqo.io", "resourcerequests", v) for v in ("get", "list", "watch", "create")}
    requests |= {("discovery.liqo.io", "resourcerequests", v) for v in ("update", "patch", "delete")}
    offers = {("sharing.liqo.io", "resourceoffers", v) for v in ("get", "list", "watch")}
    offer_status = {("sharing.liqo.io", "resourceoffers/status", v) for v in ("get", "update", "patch")}
    maps = {("offloading.liqo.io", "namespacemaps", v) for v in ("get", "list", "watch", "create")}
    maps |= {("offloading.liqo.io", "namespacemaps", v) for v in ("update", "patch", "delete")}
    map_status = {("offloading.liqo.io", "namespacemaps/status", "get")}
    heartbeat = {("coordination.k8s.io", "leases", v) for v in ("create", "get", "update", "patch")}
    # Its network word; the admission policy liqo-peer-network-configs limits writes to the one named after it.
    network = {("networking.liqo.io", "networkconfigs", v) for v in ("get", "list", "watch", "create")}
    network |= {("networking.liqo.io", "networkconfigs", v) for v in ("update", "patch", "delete")}
    assert (
        granted
        == requests
        | {("discovery.liqo.io", "resourcerequests/status", "get")}
        | offers
        | offer_status
        | maps
        | network
        | map_status
        | heartbeat
    )
    # Only the heartbeat is limited by name (its get/update/patch: a create cannot be).
    named = [rule for rule in rules if "resourceNames" in rule]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [names.CONSUMER_HEARTBEAT],
            "verbs": ["get", "update", "patch"],
        }
    ]


def test_the_binding_names_the_peers_user_and_no_group() -> None:
    binding = peer_role_binding(PEER)
    assert binding["metadata"] == {
        "name": "liqo-peer",
        "namespace": f"liqo-tenant-{PEER}",
        "labels": {names.MANAGED_BY: "liqo", names.REMOTE_CLUSTER_ID: PEER},
    }
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "liqo-peer-tenant",
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": f"liqo.io:peer:{PEER}"}
    ]
    assert binding["metadata"]["namespace"] == names.tenant_namespace(PEER)


def test_a_consumers_foreign_cluster_accepts_incoming_never_goes_outgoing_and_pins_its_key() -> None:
    fc = consumer_foreign_cluster(
        name="c",
        consumer=AuthenticatedConsumer(
            consumer_id=PEER,
            consumer_name="consumer",
            auth_url="https://c:8443",
            csr_pem=CSR,
            key_fingerprint=KEY,
            network=NETWORK,
        ),
    )
    assert fc["spec"] == {
        "clusterID": PEER,
        "clusterName": "consumer",
        "authURL": "https://c:8443",
        "incomingPeeringEnabled": "Auto",
        "outgoingPeeringEnabled": "No",
        "keyFingerprint": KEY,
        "network": {"podCIDR": "10.244.0.0/16", "serviceCIDR": "10.96.0.0/16"},
    }
    assert fc["metadata"]["labels"][names.REMOTE_CLUSTER_ID] == PEER
    without_url = consumer_foreign_cluster(
        name="c",
        consumer=AuthenticatedConsumer(
            consumer_id=PEER, consumer_name="c", auth_url=None, csr_pem=CSR, key_fingerprint=KEY, network=NETWORK
        ),
    )
    assert "authURL" not in without_url["spec"]
    assert record_of(fc) == PeerRecord(key_fingerprint=KEY, refused=False)


@pytest.mark.parametrize(
    ("spec", "record"),
    [
        ({}, PeerRecord(None, False)),
        ({"keyFingerprint": ""}, PeerRecord(None, False)),
        ({"incomingPeeringEnabled": "No"}, PeerRecord(None, True)),
        ({"incomingPeeringEnabled": "Yes", "keyFingerprint": KEY}, PeerRecord(KEY, False)),
    ],
)
def test_a_record_reads_the_pin_and_the_refusal(spec: dict[str, Any], record: PeerRecord) -> None:
    assert record_of({"metadata": {"name": "x"}, "spec": {"clusterID": PEER, **spec}}) == record


def test_the_csr_object_asks_the_client_signer_for_the_ttl() -> None:
    csr = csr_object(consumer_id=PEER, csr_pem="PEM", ttl=900)
    assert csr["metadata"] == {"generateName": "liqo-peer-", "labels": names.peer_labels(PEER)}
    assert csr["spec"] == {
        "request": base64.b64encode(b"PEM").decode(),
        "signerName": "kubernetes.io/kube-apiserver-client",
        "expirationSeconds": 900,
        "usages": ["client auth", "digital signature"],
    }


def test_an_identity_ttl_below_ten_minutes_is_refused() -> None:
    client = KubeClient(access=Access(server="https://127.0.0.1:6443"))
    with pytest.raises(ValueError, match="at least 600"):
        KubeProvisioner(
            client=client, records=FakeKube(watch_events=[]), api_server_url="https://x", ca_pem="", identity_ttl=599
        )


class FakeKube:
    """The few API calls the provisioner makes, against in-memory objects; the signer is scripted.

    It is the provisioner's cache of ForeignClusters too (:meth:`foreign_cluster`), as the endpoint's would be
    once synced: ``cached`` says what the cache shows when it lags behind the objects.
    """

    def __init__(self, *, watch_events: list[dict[str, Any]], later: dict[str, Any] | None = None) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.cached: list[dict[str, Any]] | None = None
        self.watch_events = watch_events
        self.later = later  # what a GET of the CSR returns once the watch has ended
        self.deleted: list[str] = []
        self.patches: list[tuple[str, Any]] = []  # of ForeignClusters
        self.claims: list[str] = []  # record names claimed on tenant namespaces
        self.reads: list[str] = []  # ForeignClusters read by name
        self.conflicts = 0  # conditional patches to refuse with a conflict first
        self.meanwhile: Callable[[], None] | None = None
        self.admitting_sources: frozenset[str] = frozenset()  # DiscoverySources with admitConsumers

    def _cache(self) -> list[dict[str, Any]]:
        if self.cached is not None:
            return self.cached
        return sorted(
            (o for (k, _), o in self.objects.items() if k == "ForeignCluster"), key=lambda o: o["metadata"]["name"]
        )

    def foreign_clusters_of(self, peer_id: str) -> list[dict[str, Any]]:
        seen = [fc for fc in self._cache() if fc["spec"].get("clusterID") == peer_id]
        if self.meanwhile is not None:  # another writer acts between this look and what follows it
            meanwhile, self.meanwhile = self.meanwhile, None
            meanwhile()
        return seen

    def foreign_cluster_named(self, name: str) -> dict[str, Any] | None:
        return next((fc for fc in self._cache() if fc["metadata"]["name"] == name), None)

    def foreign_cluster(self, consumer_id: str) -> dict[str, Any] | None:
        return next((fc for fc in self._cache() if fc["spec"].get("clusterID") == consumer_id), None)

    def admitting(self) -> frozenset[str]:
        return self.admitting_sources

    async def apply(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        self.objects[(resource.kind, obj["metadata"]["name"])] = obj
        return obj

    async def patch(self, resource: Resource, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        current = self.objects[(resource.kind, name)]
        if resource == NAMESPACES:  # a claim, on the resourceVersion read
            assert patch["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
            self.claims.append(patch["metadata"]["annotations"][records.CLAIM])
            annotations = current["metadata"].get("annotations", {}) | patch["metadata"]["annotations"]
            meta = current["metadata"] | {"annotations": annotations, "resourceVersion": "2"}
            self.objects[(resource.kind, name)] = current | {"metadata": meta}
            return self.objects[(resource.kind, name)]
        self.patches.append((name, patch))
        if self.conflicts:
            self.conflicts -= 1
            raise ConflictError(409, "Conflict", name)
        spec = {k: v for k, v in (current.get("spec", {}) | patch.get("spec", {})).items() if v is not None}
        meta = current["metadata"] | {"resourceVersion": str(int(current["metadata"].get("resourceVersion", "1")) + 1)}
        if "labels" in patch.get("metadata", {}):  # merge patch: null deletes
            labels = current["metadata"].get("labels", {}) | patch["metadata"]["labels"]
            meta["labels"] = {k: v for k, v in labels.items() if v is not None}
        self.objects[(resource.kind, name)] = current | {"metadata": meta, "spec": spec}
        return self.objects[(resource.kind, name)]

    async def request(self, method: str, path: str, *, body: dict[str, Any]) -> dict[str, Any]:
        assert (method, body["kind"]) == ("POST", "SelfSubjectReview")
        return {"status": {"userInfo": {"username": MANAGER}}}

    async def create(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj["metadata"].get("name") or obj["metadata"]["generateName"] + "abcde"
        if (resource.kind, name) in self.objects:
            raise ConflictError(409, "AlreadyExists", name)
        created = obj | {"metadata": obj["metadata"] | {"name": name, "resourceVersion": "1", "uid": f"uid-{name}"}}
        if resource == CSRS:  # the API server records who asked
            created["spec"] = obj["spec"] | {"username": MANAGER}
        self.objects[(resource.kind, name)] = created
        return created

    async def replace(self, resource: Resource, obj: dict[str, Any], *, subresource: str) -> dict[str, Any]:
        assert (resource, subresource) == (CSRS, "approval")
        return obj

    async def watch(self, resource: Resource, **_: Any) -> AsyncIterator[dict[str, Any]]:
        for event in self.watch_events:
            yield event
        if self.later is None:
            await asyncio.Event().wait()  # a signer that never answers

    async def get(self, resource: Resource, name: str) -> dict[str, Any]:
        if resource == FOREIGN_CLUSTERS:
            self.reads.append(name)
        if resource != CSRS:
            if (resource.kind, name) not in self.objects:
                raise NotFoundError(404, "NotFound", name)
            return self.objects[(resource.kind, name)]
        if self.later is None:
            raise NotFoundError(404, "NotFound", name)
        return self.later

    async def delete(self, resource: Resource, name: str, *, uid: str | None = None) -> None:
        self.deleted.append(name)
        self.objects.pop((resource.kind, name), None)


def provisioner(kube: FakeKube, *, timeout: float = 5.0) -> KubeProvisioner:
    return KubeProvisioner(
        client=cast(KubeClient, kube),
        records=kube,
        api_server_url="https://api",
        ca_pem="CA",
        certificate_timeout=timeout,
    )


def signed(csr_pem: str) -> dict[str, Any]:
    """A CSR object as the signer leaves it, with a certificate for ``csr_pem``'s key."""
    csr = x509.load_pem_x509_csr(csr_pem.encode())
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    cert = (
        x509.CertificateBuilder()
        .subject_name(csr.subject)
        .issuer_name(csr.subject)
        .public_key(csr.public_key())
        .serial_number(1)
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(seconds=7200))
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    return {
        "metadata": {"name": "liqo-peer-abcde", "resourceVersion": "3"},
        "status": {"certificate": base64.b64encode(pem).decode()},
    }


async def provision(
    target: KubeProvisioner, *, consumer_name: str = "rome", key: str = KEY, network: ClusterNetwork = NETWORK
) -> Issued:
    return await target.provision(
        AuthenticatedConsumer(
            consumer_id=PEER,
            consumer_name=consumer_name,
            auth_url=None,
            csr_pem=CSR,
            key_fingerprint=key,
            network=network,
        )
    )


def foreign_cluster(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": "5", "uid": "u"}, "spec": {"clusterID": PEER, **spec}}


async def test_the_certificate_comes_from_the_watch_and_the_csr_is_deleted() -> None:
    kube = FakeKube(watch_events=[{"type": "BOOKMARK", "object": {}}, {"type": "MODIFIED", "object": signed(CSR)}])
    issued = await provision(provisioner(kube))
    assert issued.namespace == names.tenant_namespace(PEER)
    assert (issued.api_server_url, issued.ca_pem) == ("https://api", "CA")
    assert issued.expires_at - datetime.datetime.now(datetime.UTC) > datetime.timedelta(seconds=7000)
    assert kube.deleted == ["liqo-peer-abcde"]
    assert kube.objects[("ForeignCluster", "rome")]["spec"]["keyFingerprint"] == KEY
    assert kube.objects[("ForeignCluster", "rome")]["spec"]["network"] == NETWORK.to_message()
    assert kube.patches == []  # a new consumer's network is in the record it is created with
    assert ("Namespace", names.tenant_namespace(PEER)) in kube.objects


async def test_a_watch_that_ends_is_followed_by_a_fresh_read() -> None:
    kube = FakeKube(watch_events=[], later=signed(CSR))
    await provision(provisioner(kube))
    assert kube.deleted == ["liqo-peer-abcde"]


async def test_a_signer_that_never_signs_is_a_clear_error_and_leaves_nothing_behind() -> None:
    kube = FakeKube(watch_events=[])
    with pytest.raises(ProvisioningError, match="signed no certificate within 0 s"):
        await provision(provisioner(kube, timeout=0.05))
    # The CSR, then what this attempt created, newest first: the ForeignCluster, the tenant namespace.
    assert kube.deleted == ["liqo-peer-abcde", "rome", names.tenant_namespace(PEER)]
    assert not [key for key in kube.objects if key[0] in ("ForeignCluster", "Namespace")]


async def test_a_denied_csr_is_an_error_and_leaves_no_csr() -> None:
    denied = {"metadata": {}, "status": {"conditions": [{"type": "Denied", "status": "True", "message": "policy"}]}}
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": denied}])
    with pytest.raises(ProvisioningError, match="was denied: policy"):
        await provision(provisioner(kube))
    assert kube.deleted[0] == "liqo-peer-abcde"


async def test_a_failure_keeps_what_existed_and_takes_back_only_its_own_pin() -> None:
    kube = FakeKube(watch_events=[])
    kube.objects[("ForeignCluster", "admins")] = foreign_cluster("admins")
    kube.objects[("Namespace", names.tenant_namespace(PEER))] = {"metadata": {"name": names.tenant_namespace(PEER)}}
    with pytest.raises(ProvisioningError):
        await provision(provisioner(kube, timeout=0.05))
    assert kube.deleted == ["liqo-peer-abcde"]
    assert "keyFingerprint" not in kube.objects[("ForeignCluster", "admins")]["spec"]
    assert "network" not in kube.objects[("ForeignCluster", "admins")]["spec"]  # recorded only once signed
    assert ("Namespace", names.tenant_namespace(PEER)) in kube.objects


async def test_an_admins_foreign_cluster_gets_the_key_on_a_condition() -> None:
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    kube.objects[("ForeignCluster", "admins")] = foreign_cluster("admins", incomingPeeringEnabled="Yes")
    kube.conflicts = 1  # someone changed it between our read and our write: read again, then pin
    await provision(provisioner(kube))
    assert [patch for _, patch in kube.patches] == [
        {"metadata": {"resourceVersion": "5"}, "spec": {"keyFingerprint": KEY}},
        {"metadata": {"resourceVersion": "5"}, "spec": {"keyFingerprint": KEY}},
        {"spec": {"network": NETWORK.to_message()}},  # last, once the certificate is signed
    ]
    assert kube.objects[("ForeignCluster", "admins")]["spec"]["keyFingerprint"] == KEY
    assert kube.objects[("ForeignCluster", "admins")]["spec"]["network"] == NETWORK.to_message()
    assert ("ForeignCluster", "rome") not in kube.objects


def test_a_key_pinned_from_an_announcement_says_who_the_cluster_is_and_admits_no_one() -> None:
    discovered = foreign_cluster("milan", keyFingerprint=KEY)
    discovered["metadata"]["labels"] = {names.DISCOVERED_BY: "lan"}
    record = record_of(discovered)
    assert record == PeerRecord(KEY, refused=False, announced=True)
    assert admission(record, consumer_id=PEER, key_fingerprint=KEY) == (True, None)  # its token, still
    needs_token, refusal = admission(record, consumer_id=PEER, key_fingerprint="sha256:" + "0" * 64)
    assert not needs_token
    assert refusal is not None
    assert "another key" in refusal  # an impostor of the announcer is refused outright
    assert admission(PeerRecord(KEY, refused=False), consumer_id=PEER, key_fingerprint=KEY) == (False, None)
    # The provider's opt-in: that source's neighbours consume on their announced key alone.
    opted_in = record_of(discovered, admitting=frozenset({"lan"}))
    assert admission(opted_in, consumer_id=PEER, key_fingerprint=KEY) == (False, None)
    assert record_of(discovered, admitting=frozenset({"corp"})).announced


async def test_a_consumer_admitted_by_its_source_is_enrolled_as_one_with_a_token() -> None:
    discovered = foreign_cluster("milan", keyFingerprint=KEY)
    discovered["metadata"]["labels"] = {names.DISCOVERED_BY: "lan"}
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    kube.admitting_sources = frozenset({"lan"})
    kube.objects[("ForeignCluster", "milan")] = discovered
    await provision(provisioner(kube))
    assert kube.objects[("ForeignCluster", "milan")]["metadata"]["labels"] == {}  # the peering's now


async def test_a_token_enrolment_makes_a_discovered_record_the_peerings_and_a_failure_gives_it_back() -> None:
    discovered = foreign_cluster("milan", keyFingerprint=KEY)
    discovered["metadata"]["labels"] = {names.DISCOVERED_BY: "lan", "team": "edge"}
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    kube.objects[("ForeignCluster", "milan")] = copy.deepcopy(discovered)
    await provision(provisioner(kube))
    enrolled = kube.objects[("ForeignCluster", "milan")]
    assert enrolled["metadata"]["labels"] == {"team": "edge"}  # discovery no longer ages it out
    assert enrolled["spec"]["keyFingerprint"] == KEY
    assert kube.patches[0] == (
        "milan",
        {"metadata": {"labels": {names.DISCOVERED_BY: None}, "resourceVersion": "5"}, "spec": {"keyFingerprint": KEY}},
    )

    failing = FakeKube(watch_events=[])
    failing.objects[("ForeignCluster", "milan")] = copy.deepcopy(discovered)
    with pytest.raises(ProvisioningError):
        await provision(provisioner(failing, timeout=0.05))
    given_back = failing.objects[("ForeignCluster", "milan")]
    assert given_back["metadata"]["labels"] == discovered["metadata"]["labels"]
    assert given_back["spec"]["keyFingerprint"] == KEY


async def test_a_renewal_records_the_network_only_when_it_changed() -> None:
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    kube.objects[("ForeignCluster", "rome")] = foreign_cluster("rome", keyFingerprint=KEY, network=NETWORK.to_message())
    await provision(provisioner(kube))
    assert kube.patches == []
    kube.watch_events = [{"type": "MODIFIED", "object": signed(CSR)}]
    await provision(provisioner(kube), network=MOVED)
    assert kube.patches == [("rome", {"spec": {"network": MOVED.to_message()}})]
    assert kube.objects[("ForeignCluster", "rome")]["spec"]["network"] == MOVED.to_message()


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ({"keyFingerprint": OTHER_KEY}, "another key is registered"),
        ({"keyFingerprint": KEY, "incomingPeeringEnabled": "No"}, "does not accept cluster"),
    ],
)
async def test_a_record_found_refusing_at_provisioning_time_creates_nothing(
    spec: dict[str, Any], complaint: str
) -> None:
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    kube.objects[("ForeignCluster", "admins")] = foreign_cluster("admins", **spec)
    with pytest.raises(PeerDenied, match=complaint):
        await provision(provisioner(kube))
    assert sorted(kind for kind, _ in kube.objects) == ["ForeignCluster"]
    assert kube.patches == []


async def test_a_foreign_cluster_name_taken_by_another_peer_gets_the_id_prefix_then_the_id() -> None:
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    kube.objects[("ForeignCluster", "rome")] = {"metadata": {"name": "rome"}, "spec": {"clusterID": "another"}}
    await provision(provisioner(kube))
    assert kube.objects[("ForeignCluster", f"rome-{PEER[:8]}")]["spec"]["clusterName"] == "rome"
    assert kube.objects[("ForeignCluster", "rome")]["spec"]["clusterID"] == "another"  # never taken over


async def test_a_terminating_tenant_namespace_is_a_retryable_error() -> None:
    kube = FakeKube(watch_events=[])
    namespace = names.tenant_namespace(PEER)
    kube.objects[("Namespace", namespace)] = {
        "metadata": {"name": namespace, "deletionTimestamp": "2030-01-01T00:00:00Z"}
    }
    with pytest.raises(ProvisioningError, match="is being deleted"):
        await provision(provisioner(kube))
    assert kube.deleted == []  # nothing was made: no ForeignCluster, no CSR
    assert ("ForeignCluster", "rome") not in kube.objects


async def test_a_record_being_deleted_is_waited_for_never_doubled() -> None:
    """An unpeer finishing: the consumer tries again once its old record is gone, under the same name then."""
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    dying = foreign_cluster("rome", keyFingerprint=KEY)
    dying["metadata"]["deletionTimestamp"] = "2030-01-01T00:00:00Z"
    kube.objects[("ForeignCluster", "rome")] = dying
    with pytest.raises(ProvisioningError, match=f"ForeignCluster rome of {PEER} is being deleted"):
        await provision(provisioner(kube))
    assert sorted(kube.objects) == [("ForeignCluster", "rome")]  # its tenant namespace made, then undone
    assert kube.deleted == [names.tenant_namespace(PEER)]


async def test_a_record_is_made_under_the_name_claimed_on_the_tenant_namespace() -> None:
    """liqoctl peer, declaring our own peering with that cluster, claimed a name of the admin's choosing first."""
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    namespace = names.tenant_namespace(PEER)
    tenant = {"metadata": {"name": namespace, "resourceVersion": "1", "annotations": {records.CLAIM: "by-admin"}}}
    kube.objects[("Namespace", namespace)] = tenant
    await provision(provisioner(kube))
    assert [name for kind, name in kube.objects if kind == "ForeignCluster"] == ["by-admin"]
    assert kube.claims == []  # claimed already


async def test_a_record_made_between_our_look_and_our_create_is_reused() -> None:
    """The other writer made the peer's record under the very name we were about to: found, pinned, not doubled."""
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])

    def meanwhile() -> None:  # liqoctl peer's record for the same cluster, our pin missing
        kube.objects[("ForeignCluster", "rome")] = foreign_cluster("rome", outgoingPeeringEnabled="Yes")

    kube.meanwhile = meanwhile
    await provision(provisioner(kube))
    [(kind, name)] = [key for key in kube.objects if key[0] == "ForeignCluster"]
    assert name == "rome"
    spec = kube.objects[(kind, name)]["spec"]
    assert (spec["keyFingerprint"], spec["outgoingPeeringEnabled"]) == (KEY, "Yes")


async def test_a_record_is_read_from_the_cache_and_the_decision_on_the_object_read_again_by_name() -> None:
    """No list of every ForeignCluster, ever: the cache names the consumer's, one GET decides."""
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    kube.objects[("ForeignCluster", "admins")] = foreign_cluster("admins")
    target = provisioner(kube)
    assert await target.record(PEER) == PeerRecord(None, False)
    assert kube.reads == []  # the record is the cache's
    await provision(target)
    assert kube.reads == ["admins"]
    assert kube.objects[("ForeignCluster", "admins")]["spec"]["keyFingerprint"] == KEY


async def test_a_record_the_cache_has_not_seen_yet_is_found_by_the_name_it_takes() -> None:
    """A concurrent handshake of the same ID made ``rome`` an instant ago: the create that conflicts is followed by a
    read of the record under the claim, judged, no second one made."""
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    kube.objects[("ForeignCluster", "rome")] = foreign_cluster("rome", keyFingerprint=OTHER_KEY)
    kube.cached = []
    with pytest.raises(PeerDenied, match="another key is registered"):
        await provision(target := provisioner(kube))
    assert sorted(name for kind, name in kube.objects if kind == "ForeignCluster") == ["rome"]
    kube.objects[("ForeignCluster", "rome")] = foreign_cluster("rome", keyFingerprint=KEY)
    await provision(target)
    assert sorted(name for kind, name in kube.objects if kind == "ForeignCluster") == ["rome"]


async def test_the_record_claimed_on_the_tenant_namespace_wins_over_a_cache_that_has_not_seen_it() -> None:
    """liqoctl peer made its record an instant ago, under its claim: read by that name and pinned, never doubled."""
    kube = FakeKube(watch_events=[{"type": "MODIFIED", "object": signed(CSR)}])
    namespace = names.tenant_namespace(PEER)
    tenant = {"metadata": {"name": namespace, "resourceVersion": "1", "annotations": {records.CLAIM: "by-admin"}}}
    kube.objects[("Namespace", namespace)] = tenant
    kube.objects[("ForeignCluster", "by-admin")] = foreign_cluster("by-admin", outgoingPeeringEnabled="Yes")
    kube.cached = []
    await provision(provisioner(kube))
    assert [name for kind, name in kube.objects if kind == "ForeignCluster"] == ["by-admin"]
    spec = kube.objects[("ForeignCluster", "by-admin")]["spec"]
    assert (spec["keyFingerprint"], spec["outgoingPeeringEnabled"]) == (KEY, "Yes")
    assert (kube.claims, kube.reads) == ([], ["by-admin"])
