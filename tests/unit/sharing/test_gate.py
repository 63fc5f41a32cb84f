from __future__ import annotations

import datetime

import pytest

from liqo.api.networks import ClusterNetwork
from liqo.api.provisioner import AuthenticatedConsumer, Issued, PeerDenied, PeerRecord, ProvisioningError
from liqo.api.resources import SHARING_POLICIES
from liqo.kube.objects import Obj
from liqo.sharing.gate import PolicyGate

CONSUMER = "6f1c2d3e-0000-4000-8000-000000000001"
ISSUED = Issued(
    api_server_url="https://127.0.0.1:6443",
    ca_pem="ca",
    certificate_pem="cert",
    namespace=f"liqo-tenant-{CONSUMER}",
    expires_at=datetime.datetime(2030, 1, 2, tzinfo=datetime.UTC),
)
ASK = AuthenticatedConsumer(
    consumer_id=CONSUMER,
    consumer_name="rome",
    auth_url="https://127.0.0.1:8443",
    csr_pem="csr",
    key_fingerprint="sha256:abc",
    network=ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16"),
)


def policy(name: str, *, action: str, peers: list[str] | None = None) -> Obj:
    spec: Obj = {"action": action} | ({"peers": peers} if peers else {})
    return {
        "apiVersion": SHARING_POLICIES.api_version,
        "kind": "SharingPolicy",
        "metadata": {"name": name},
        "spec": spec,
    }


class Policies:
    """The SharingPolicies as an informer's cache holds them; how often they were read."""

    def __init__(self, *items: Obj) -> None:
        self.items = list(items)
        self.reads = 0

    def __call__(self) -> list[Obj]:
        self.reads += 1
        return self.items


class FakeProvisioner:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error
        self.asked: list[AuthenticatedConsumer] = []

    async def record(self, consumer_id: str) -> PeerRecord | None:
        return PeerRecord(key_fingerprint="sha256:abc", refused=False) if consumer_id == CONSUMER else None

    async def provision(self, consumer: AuthenticatedConsumer) -> Issued:
        self.asked.append(consumer)
        if self.error is not None:
            raise self.error
        return ISSUED


@pytest.mark.parametrize(
    "policies",
    [
        [],
        [policy("default", action="Share")],
        [policy("default", action="Deny"), policy("rome", action="Share", peers=[CONSUMER])],
        [policy("by-name", action="Deny", peers=["rome"])],  # the name a consumer claims counts for nothing
    ],
)
async def test_a_peer_no_policy_denies_is_provisioned(policies: list[Obj]) -> None:
    reader, provisioner = Policies(*policies), FakeProvisioner()
    assert await PolicyGate(policies=reader, provisioner=provisioner).provision(ASK) == ISSUED
    assert provisioner.asked == [ASK]
    assert reader.reads == 1


@pytest.mark.parametrize(
    "policies",
    [
        [policy("default", action="Deny")],
        [policy("default", action="Share"), policy("no-rome", action="Deny", peers=[CONSUMER])],
    ],
)
async def test_a_denied_peer_is_refused_before_anything_is_provisioned(policies: list[Obj]) -> None:
    provisioner = FakeProvisioner()
    with pytest.raises(PeerDenied, match="sharing policy denies peering with you"):
        await PolicyGate(policies=Policies(*policies), provisioner=provisioner).provision(ASK)
    assert provisioner.asked == []


async def test_the_provisioners_refusals_and_failures_pass_through() -> None:
    for error in (PeerDenied("another key is registered"), ProvisioningError("namespace is being deleted")):
        with pytest.raises(type(error), match=str(error)):
            await PolicyGate(policies=Policies(), provisioner=FakeProvisioner(error)).provision(ASK)


async def test_records_are_the_provisioners() -> None:
    gate = PolicyGate(policies=Policies(policy("default", action="Deny")), provisioner=FakeProvisioner())
    assert await gate.record(CONSUMER) == PeerRecord(key_fingerprint="sha256:abc", refused=False)
    assert await gate.record("someone-else") is None
