"""Who a peer is, end to end: each attack on peer identity tried with what an attacker really holds.

Real clusters with liqo installed (rome and naples consume, milan provides). The attacker holds a peer command
of milan's (its enrolment token: one was given to it, or to someone it got it from) and its own cluster key; it
runs none of our code when it attacks, so the attacks below speak the protocol directly. Each is refused with
a clear reason, and leaves nothing on milan.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ssl
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.components import MANAGER
from liqo.api.identity import read_cluster_key
from liqo.api.networks import ClusterNetwork
from liqo.api.provisioner import AuthenticatedConsumer, Issued, PeerRecord
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS, SHARING_POLICIES
from liqo.kube import pki
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.resources import NAMESPACES, ROLE_BINDINGS, SECRETS
from liqo.peering import authclient, enrolment, operations, tokens
from liqo.peering.authprotocol import NonceStore
from liqo.peering.authserver import RateLimit, auth_app
from liqo.peering.enrolment import Refusal
from liqo.peering.tokens import EnrolmentToken
from tests.integration.helpers import (
    RUN_ID,
    Site,
    expect_clean,
    from_address,
    held_for,
    liqoctl_run,
    signed_identity_request,
)
from tests.shared import eventually

ATTACKERS_NETWORK = ClusterNetwork.parse(pod_cidr="10.66.0.0/16", service_cidr="10.67.0.0/16")


async def attack(
    command: operations.PeerCommand, *, claim: str, key: ClusterKey, name: str = "attacker"
) -> authclient.Identity:
    """A handshake as anyone holding ``key`` and the command's token would run it, claiming cluster ID ``claim``."""
    return await authclient.request_identity(
        auth_url=command.auth_url,
        key=key,
        token=command.token,
        consumer_id=claim,
        consumer_name=name,
        consumer_network=ATTACKERS_NETWORK,
        expected_provider_id=command.cluster_id,
        expected_fingerprint=command.key_fingerprint,
    )


async def forget(milan: KubeClient, consumer: str) -> None:
    """Delete milan's record of ``consumer`` (a revoked peer's stays until the admin forgets it)."""
    fcs, _ = await milan.list_all(FOREIGN_CLUSTERS)
    for fc in fcs:
        if fc["spec"]["clusterID"] == consumer:
            with contextlib.suppress(NotFoundError):
                await milan.delete(FOREIGN_CLUSTERS, fc["metadata"]["name"])


async def test_a_wrong_token_fails_liqoctl_peer_at_once_with_the_providers_reason(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    command = await operations.peer_command(milan)
    rome_kc = f"--kubeconfig={sites['rome'].cluster.kubeconfig}"
    started = time.monotonic()
    done = await asyncio.to_thread(
        liqoctl_run,
        "peer", "out-of-band", command.name, f"--auth-url={command.auth_url}", f"--cluster-id={command.cluster_id}",
        f"--key-fingerprint={command.key_fingerprint}", "--auth-token=not-the-token", rome_kc,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    try:
        assert done.returncode == 1
        message = " ".join(done.stderr.split())
        assert "the provider refused (401): unknown enrolment token" in message, message
        assert elapsed < operations.PEER_TIMEOUT / 2, f"waited {elapsed:.0f}s for a refusal"
        assert (await held_for(milan, sites["rome"].cluster_id))["tenant"] is None
    finally:
        await operations.unpeer(rome, command.cluster_id, timeout=60, force=True)
    await expect_clean(rome, milan)


async def test_a_consumer_cannot_claim_another_consumers_cluster_id(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, naples: KubeClient
) -> None:
    """naples holds milan's token and its own key; rome is peered: naples cannot become rome."""
    rome_id = sites["rome"].cluster_id
    await operations.peer(rome, milan, timeout=30)
    try:
        command = await operations.peer_command(milan)
        naples_key = await read_cluster_key(naples)
        assert naples_key is not None
        before = await held_for(milan, rome_id)
        with pytest.raises(authclient.AuthRejected) as caught:
            await attack(command, claim=rome_id, key=naples_key, name="rome")
        assert caught.value.status == 403
        assert "another key is registered" in caught.value.reason
        assert await held_for(milan, rome_id) == before
    finally:
        await operations.unpeer(rome, sites["milan"].cluster_id, timeout=60)
    await expect_clean(rome, milan, naples)


async def test_one_peer_command_enrols_one_cluster_and_a_second_is_refused_with_nothing_made(
    sites: dict[str, Site], milan: KubeClient
) -> None:
    """The token alone, no cluster of ours: two fresh cluster IDs, each with a key of its own, one command.

    With one shared token each fresh ID got a tenant, a policy's share, a budget and (accepted) a gateway:
    anyone who was ever given a peer command could mint identities at will.
    """
    command = await operations.peer_command(milan)
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    try:
        enrolled = await attack(command, claim=first, key=ClusterKey.generate(), name="first")
        assert enrolled.namespace == names.tenant_namespace(first)
        with pytest.raises(authclient.AuthRejected) as caught:
            await attack(command, claim=second, key=ClusterKey.generate(), name="second")
        assert caught.value.status == 401
        assert "already used" in caught.value.reason, caught.value.reason
        assert await held_for(milan, second) == {"foreign clusters": [], "csrs": [], "tenant": None}
    finally:
        for consumer in (first, second):
            await forget(milan, consumer)
            with contextlib.suppress(NotFoundError):
                await milan.delete(NAMESPACES, names.tenant_namespace(consumer))
    await expect_clean(milan)


def signed_for(csr_pem: str) -> tuple[str, str, datetime.datetime]:
    """A certificate for the CSR's key from a CA of the attacker's own: ``(certificate, ca, expiry)``."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "attacker-ca")])
    csr = x509.load_pem_x509_csr(csr_pem.encode())
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    expiry = now + datetime.timedelta(hours=2)

    def build(subject: x509.Name, public_key: Any) -> x509.Certificate:
        builder = x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(public_key)
        builder = builder.serial_number(x509.random_serial_number()).not_valid_before(now).not_valid_after(expiry)
        return builder.sign(ca_key, hashes.SHA256())

    pem = serialization.Encoding.PEM
    leaf, ca = build(csr.subject, csr.public_key()), build(ca_name, ca_key.public_key())
    return leaf.public_bytes(pem).decode(), ca.public_bytes(pem).decode(), expiry


class AttackersProvisioner:
    """What a fake provider hands out: a well-formed identity on the attacker's own API server."""

    async def record(self, consumer_id: str) -> PeerRecord | None:
        return None

    async def provision(self, consumer: AuthenticatedConsumer) -> Issued:
        certificate, ca, expiry = signed_for(consumer.csr_pem)
        return Issued(
            api_server_url="https://127.0.0.1:9",  # where the consumer's pods, Secrets and tokens would go
            ca_pem=ca,
            certificate_pem=certificate,
            namespace=names.tenant_namespace(consumer.consumer_id),
            expires_at=expiry,
        )


class AttackersEnrolments:
    """A fake provider enrols anyone: what it wants is the consumer's trust, not the consumer's proof."""

    async def find(self, fingerprint: str) -> EnrolmentToken | None:
        expiry = datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        return EnrolmentToken(
            id=tokens.token_id(fingerprint), fingerprint=fingerprint, expires_at=expiry, created_at=None, uid=""
        )

    async def refusal(self) -> Refusal | None:
        return None

    async def consume(self, token: EnrolmentToken) -> bool:
        return True

    async def restore(self, token: EnrolmentToken) -> None:
        return None

    async def settle(self, consumer_id: str, *, key_fingerprint: str) -> None:
        return None


@pytest.fixture
async def fake_milan(milan: KubeClient, tmp_path: Path) -> AsyncIterator[operations.PeerCommand]:
    """An HTTPS endpoint run by a holder of a token of milan's, posing as milan (it lies about its key in /ids)."""
    genuine = await operations.peer_command(milan)
    app = auth_app(
        cluster_id=genuine.cluster_id,
        cluster_name=genuine.name,
        key=ClusterKey.generate(),
        network=ATTACKERS_NETWORK,
        enrolments=AttackersEnrolments(),
        provisioner=AttackersProvisioner(),
        caches=SharedInformers(milan),  # none: the attacker knows nothing it would need to cache
        nonces=NonceStore(),
        limiter=RateLimit().limiter(),
    )

    @web.middleware
    async def lie(request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path == "/ids":
            body = {
                "clusterID": genuine.cluster_id,
                "clusterName": genuine.name,
                "keyFingerprint": genuine.key_fingerprint,
            }
            return web.json_response(body)
        response: web.StreamResponse = await handler(request)
        return response

    app.middlewares.append(lie)
    tls = pki.issue(pki.make_ca("fake-milan"), common_name="milan", ip_addresses=["127.0.0.1"], server=True)
    pki.write_private(tmp_path / "tls.pem", tls.cert + tls.key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.pem")
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context).start()
    url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield operations.PeerCommand(genuine.name, url, genuine.cluster_id, genuine.key_fingerprint, genuine.token)
    finally:
        await runner.cleanup()


async def test_a_fake_provider_holding_the_token_gets_nothing(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, fake_milan: operations.PeerCommand
) -> None:
    """rome's manager refuses the answer: not signed by milan's key. No identity is stored, nothing trusted."""
    milan_id = sites["milan"].cluster_id
    namespace = names.tenant_namespace(milan_id)
    try:
        asked = datetime.datetime.now(datetime.UTC)
        await operations.peer_out_of_band(rome, fake_milan)
        with pytest.raises(operations.PeeringError, match=r"ProviderNotAuthenticated|not the provider's"):
            await operations.wait_established(rome, milan_id, timeout=30, since=asked)
        with pytest.raises(NotFoundError):
            await rome.get(SECRETS, names.IDENTITY_SECRET, namespace=namespace)
    finally:
        await operations.unpeer(rome, milan_id, timeout=60, force=True)
    await expect_clean(rome, milan)


async def test_a_revoked_consumer_stays_refused_until_the_admin_allows_it_again(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    await operations.peer(rome, milan, timeout=30)
    try:
        await operations.unpeer(milan, rome_id, timeout=90)  # milan only provides to rome: a revocation
        record = await operations.foreign_cluster(milan, rome_id)
        assert record is not None
        assert record["spec"]["incomingPeeringEnabled"] == "No"
        # rome's identity is still valid but worth nothing now: its manager notices (401/403 from milan), tries
        # again with its own key and the token, and learns why — without waiting for the identity's renewal.

        async def refused() -> bool:
            fc = await operations.foreign_cluster(rome, milan_id)
            conditions = {c["type"]: c for c in ((fc or {}).get("status") or {}).get("conditions") or []}
            auth = conditions.get("AuthenticationStatus", {})
            return auth.get("status") == "Denied" and "does not accept cluster" in auth.get("message", "")

        await eventually(refused, timeout=60, message="rome's re-authentication is refused, and says why")
        side = await held_for(milan, rome_id)
        assert side["tenant"] is None
        assert side["csrs"] == []
        await operations.allow(milan, rome_id)
        await operations.peer(rome, milan, timeout=60)  # the user peers again: it works
    finally:
        await operations.unpeer(rome, milan_id, timeout=90, force=True)
        await forget(milan, rome_id)
    await expect_clean(rome, milan)


async def test_incoming_peering_disabled_refuses_a_new_peer_at_once_with_the_reason(
    sites: dict[str, Site], naples: KubeClient, milan: KubeClient
) -> None:
    naples_id, milan_id = sites["naples"].cluster_id, sites["milan"].cluster_id
    await milan.create(
        FOREIGN_CLUSTERS,
        {
            "apiVersion": FOREIGN_CLUSTERS.api_version,
            "kind": FOREIGN_CLUSTERS.kind,
            "metadata": {"name": f"naples-{RUN_ID}"},
            "spec": {"clusterID": naples_id, "incomingPeeringEnabled": "No", "outgoingPeeringEnabled": "No"},
        },
    )
    try:
        started = time.monotonic()
        with pytest.raises(operations.PeeringError, match="does not accept cluster"):
            await operations.peer(naples, milan, timeout=60)
        assert time.monotonic() - started < 30
        assert (await held_for(milan, naples_id))["tenant"] is None
    finally:
        await operations.unpeer(naples, milan_id, timeout=60, force=True)
        await forget(milan, naples_id)
    await expect_clean(naples, milan)


async def test_a_policy_follows_the_certified_cluster_id_not_the_claimed_name(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    rome_id = sites["rome"].cluster_id
    policy = {
        "apiVersion": SHARING_POLICIES.api_version,
        "kind": SHARING_POLICIES.kind,
        "metadata": {"name": f"deny-rome-{RUN_ID}"},
        "spec": {"peers": [rome_id], "action": "Deny"},
    }
    await milan.create(SHARING_POLICIES, policy)
    try:
        rome_key = await read_cluster_key(rome)
        assert rome_key is not None
        command = await operations.peer_command(milan)
        for claimed_name in ("naples", "milan", "Rome-but-renamed"):
            with pytest.raises(authclient.AuthRejected, match="denies peering with you"):
                await attack(command, claim=rome_id, key=rome_key, name=claimed_name)
        assert (await held_for(milan, rome_id))["tenant"] is None
        # A policy naming peers by name would be dodged (or borrowed) by renaming: the schema refuses it.
        by_name = policy | {"metadata": {"name": f"by-name-{RUN_ID}"}, "spec": {"peers": ["rome"], "action": "Deny"}}
        with pytest.raises(ApiError) as caught:
            await milan.create(SHARING_POLICIES, by_name)
        assert caught.value.status == 422
        assert "spec.peers[0]" in caught.value.message
    finally:
        await milan.delete(SHARING_POLICIES, f"deny-rome-{RUN_ID}")
        await forget(milan, rome_id)
    await expect_clean(rome, milan)


async def test_revoking_a_token_keeps_established_peers_and_refuses_its_command(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, naples: KubeClient
) -> None:
    """The operator lists milan's outstanding tokens and revokes naples' before naples uses it; rome goes on."""
    milan_id = sites["milan"].cluster_id
    milan_kc = f"--kubeconfig={sites['milan'].cluster.kubeconfig}"
    old = await operations.peer_command(milan)
    assert old.enrolment is not None
    await operations.peer(rome, milan, timeout=30)
    try:
        listed = await asyncio.to_thread(liqoctl_run, "token", "list", "-o", "json", milan_kc)
        assert listed.returncode == 0, listed.stderr
        ids = [token["id"] for token in orjson.loads(listed.stdout)]
        assert old.enrolment.id in ids
        revoked = await asyncio.to_thread(liqoctl_run, "token", "revoke", old.enrolment.id, milan_kc)
        assert (revoked.returncode, revoked.stdout.strip()) == (0, f"revoked enrolment token {old.enrolment.id}")
        listed = await asyncio.to_thread(liqoctl_run, "token", "list", "-o", "yaml", milan_kc)
        assert old.enrolment.id not in listed.stdout
        # rome renews from scratch (its identity deleted): its key is enough, its token long used up.
        await rome.delete(SECRETS, names.IDENTITY_SECRET, namespace=names.tenant_namespace(milan_id))

        async def renewed() -> bool:
            try:
                await rome.get(SECRETS, names.IDENTITY_SECRET, namespace=names.tenant_namespace(milan_id))
            except NotFoundError:
                return False
            return True

        await eventually(renewed, timeout=60, message="rome renews its identity with its key alone")
        asked = datetime.datetime.now(datetime.UTC)
        await operations.peer_out_of_band(naples, old)
        with pytest.raises(operations.PeeringError, match="unknown enrolment token"):
            await operations.wait_established(naples, milan_id, timeout=30, since=asked)
    finally:
        for client in (rome, naples):
            await operations.unpeer(client, milan_id, timeout=60, force=True)
    await expect_clean(rome, milan, naples)


async def test_over_the_pending_cap_liqoctl_peer_fails_at_once_with_the_providers_reason(
    sites: dict[str, Site], naples: KubeClient, milan: KubeClient
) -> None:
    """milan's default cap: as many consumers enrolled as it takes without an accepted offer, each with a token of
    its own (a token holder cannot mint them any more), and naples, with a token of its own too, is told to wait."""
    milan_id, naples_id = sites["milan"].cluster_id, sites["naples"].cluster_id
    bindings, _ = await milan.list_all(ROLE_BINDINGS, field_selector=f"metadata.name={names.PEER_BINDING}")
    offers, _ = await milan.list_all(RESOURCE_OFFERS, field_selector=f"metadata.name={milan_id}")
    pending = len(enrolment.occupancy(bindings=bindings, offers=offers, local_id=milan_id).pending)
    fillers = [str(uuid.uuid4()) for _ in range(enrolment.DEFAULT_MAX_PENDING_TENANTS - pending)]
    command = await operations.peer_command(milan)
    naples_kc = f"--kubeconfig={sites['naples'].cluster.kubeconfig}"
    try:
        for number, filler in enumerate(fillers, start=1):  # each a cluster of its own, at an address of its own
            filler_command = await operations.peer_command(milan)
            status, answer = await signed_identity_request(
                command.auth_url, consumer=filler, key=ClusterKey.generate(), token=filler_command.token,
                source=f"127.0.1.{number}",
            )  # fmt: skip
            assert status == 200, answer
        started = time.monotonic()
        done = await asyncio.to_thread(
            liqoctl_run,
            "peer", "out-of-band", command.name, f"--auth-url={command.auth_url}", f"--cluster-id={milan_id}",
            f"--key-fingerprint={command.key_fingerprint}", f"--auth-token={command.token}", naples_kc,
        )  # fmt: skip
        elapsed = time.monotonic() - started
        assert done.returncode == 1
        message = " ".join(done.stderr.split())
        assert "the provider refused (429): this cluster has" in message, message
        assert f"have not accepted an offer yet, the most it takes ({enrolment.DEFAULT_MAX_PENDING_TENANTS})" in message
        assert elapsed < operations.PEER_TIMEOUT / 2, f"waited {elapsed:.0f}s for a refusal"
        assert await held_for(milan, naples_id) == {"foreign clusters": [], "csrs": [], "tenant": None}
        assert command.enrolment is not None
        assert command.enrolment.id in {token.id for token in await enrolment.outstanding(milan)}  # kept for later
    finally:
        await operations.unpeer(naples, milan_id, timeout=60, force=True)
        for filler in fillers:
            await forget(milan, filler)
            with contextlib.suppress(NotFoundError):
                await milan.delete(NAMESPACES, names.tenant_namespace(filler))
    await expect_clean(naples, milan)


async def test_a_flood_from_one_address_is_throttled_and_another_address_is_still_served(
    sites: dict[str, Site], milan: KubeClient
) -> None:
    """No token, no key: a stranger at 127.0.0.2 asks milan's real endpoint for nonces as fast as it can.

    Past its burst it is answered 429 with Retry-After and the reason, before anything else is looked at (a
    malformed identity request is not even parsed), while 127.0.0.3 is served as usual. (A cold CI run, the
    machine busy building, saw the one identity request it sent then served: the bucket had refilled.)
    """
    auth_url = (await operations.installed(milan, role="provider")).auth_url
    async with from_address("127.0.0.2") as flooder, from_address("127.0.0.3") as other:
        served, throttled = 0, None
        for _ in range(200):
            async with flooder.post(f"{auth_url}/nonce") as response:
                if response.status != 200:
                    throttled = (response.status, response.headers.get("Retry-After"), await response.json())
                    break
                served += 1
        assert throttled is not None, f"{served} nonces served to one address in a row, none refused"
        status, retry_after, answer = throttled
        assert status == 429
        assert retry_after is not None
        assert retry_after.isdigit(), retry_after
        assert int(retry_after) >= 1
        assert answer["reason"].startswith("too many requests from 127.0.0.2"), answer
        assert served >= 20  # the default burst
        # Refused before the body is read: 429, never the 400 a malformed body gets. The bucket refills two a
        # second, so on a busy machine a request or two may pass (and get that 400) before it is empty again.
        statuses = []
        for _ in range(10):
            async with flooder.post(f"{auth_url}/identity", data=b"not json") as response:
                statuses.append(response.status)
            if statuses[-1] != 400:
                break
        assert statuses[-1] == 429, statuses
        async with other.post(f"{auth_url}/nonce") as response:
            assert response.status == 200
        async with other.post(f"{auth_url}/identity", data=b"not json") as response:
            assert (response.status, (await response.json())["reason"]) == (400, "the body is not valid JSON")


async def test_a_cluster_name_with_control_characters_is_refused_naming_the_field_and_forges_no_log_line(
    sites: dict[str, Site], milan: KubeClient
) -> None:
    """A peer command's token and a key of its own: the name it claims would write a line of its own in milan's
    log (and clear the terminal of whoever reads it). 400 naming the field, nothing made, the token not used up."""
    command = await operations.peer_command(milan)
    consumer = str(uuid.uuid4())
    forged = "2026-01-01 00:00:00,000 INFO liqo.manager forged line"
    try:
        status, answer = await signed_identity_request(
            command.auth_url,
            consumer=consumer,
            key=ClusterKey.generate(),
            token=command.token,
            clusterName=f"evil\n{forged}\x1b[2J",
        )
        assert status == 400, answer
        assert answer["reason"].startswith("'clusterName' "), answer
        assert "control character" in answer["reason"], answer
        assert await held_for(milan, consumer) == {"foreign clusters": [], "csrs": [], "tenant": None}
        assert command.enrolment is not None
        assert command.enrolment.id in {token.id for token in await enrolment.outstanding(milan)}
        log = (sites["milan"].cluster.dir.logs / f"{MANAGER}.log").read_text(errors="replace")
        assert f"refused (400): {answer['reason']}" in log  # the refusal was logged: the request was handled
        assert not [line for line in log.splitlines() if line.startswith(forged)]
        assert "\x1b" not in log
    finally:
        await forget(milan, consumer)
        with contextlib.suppress(NotFoundError):
            await milan.delete(NAMESPACES, names.tenant_namespace(consumer))
        with contextlib.suppress(NotFoundError):
            assert command.enrolment is not None
            await milan.delete(SECRETS, tokens.secret_name(command.enrolment.id), namespace=names.LIQO_NAMESPACE)
