"""The authentication endpoint and client over real loopback HTTP, with a fake provisioner.

The fake keeps the provider's records in memory and pins a new consumer's key as the real one does, so the
checks' order and outcomes — who needs the token, who is refused, what is never looked at — are tested here;
the Kubernetes side of pinning is tested on a real cluster (tests/integration/peering/test_auth.py).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.typedefs import Middleware
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.networks import ClusterNetwork
from liqo.api.provisioner import (
    AuthenticatedConsumer,
    Issued,
    PeerDenied,
    PeerRecord,
    ProvisioningBusy,
    ProvisioningError,
)
from liqo.kube import pki
from liqo.kube.kubeconfig import load_dict
from liqo.kube.ratelimit import SourceLimiter
from liqo.peering import authclient
from liqo.peering.authprotocol import (
    KEY_SIGNATURE,
    MAX_BODY,
    TOKEN_SIGNATURE,
    NonceStore,
    make_csr,
    sign_answer,
    sign_request,
)
from liqo.peering.authserver import NOT_SYNCED, RateLimit, auth_app, source_of
from liqo.peering.enrolment import Refusal
from liqo.peering.tokens import UNKNOWN_TOKEN, EnrolmentToken, enrolment_key, token_id

TOKEN = "dG9rZW4tb2YtdGhlLXByb3ZpZGVyLTMyLWJ5dGVzLS0tLQ"
PROVIDER = "0f7e9b3a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
CONSUMER = "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
OTHER_CONSUMER = "b1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
PROVIDER_KEY = ClusterKey.generate()
CONSUMER_KEY = ClusterKey.generate()
INTRUDER_KEY = ClusterKey.generate()
PROVIDER_NETWORK = ClusterNetwork.parse(pod_cidr="10.245.0.0/16", service_cidr="10.97.0.0/16")
CONSUMER_NETWORK = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16")
CA_KEY = ec.generate_private_key(ec.SECP256R1())
CA_NAME = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])


def signed_certificate(csr_pem: str, *, other_key: bool = False) -> tuple[str, datetime.datetime]:
    """What a cluster's client signer would return for ``csr_pem`` (or for another key)."""
    csr = x509.load_pem_x509_csr(csr_pem.encode())
    public = ec.generate_private_key(ec.SECP256R1()).public_key() if other_key else csr.public_key()
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    not_after = now + datetime.timedelta(hours=2)
    cert = (
        x509.CertificateBuilder()
        .subject_name(csr.subject)
        .issuer_name(CA_NAME)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(not_after)
        .sign(CA_KEY, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode(), not_after


@dataclass
class FakeProvisioner:
    calls: list[dict[str, Any]] = field(default_factory=list)
    csrs: list[str] = field(default_factory=list)
    records: dict[str, PeerRecord] = field(default_factory=dict)
    lookups: list[str] = field(default_factory=list)
    error: Exception | None = None
    other_key: bool = False

    async def record(self, consumer_id: str) -> PeerRecord | None:
        self.lookups.append(consumer_id)
        return self.records.get(consumer_id)

    async def provision(self, consumer: AuthenticatedConsumer) -> Issued:
        self.calls.append(
            {
                "consumer_id": consumer.consumer_id,
                "consumer_name": consumer.consumer_name,
                "auth_url": consumer.auth_url,
                "network": consumer.network,
            }
        )
        self.csrs.append(consumer.csr_pem)
        if self.error:
            raise self.error
        self.records.setdefault(
            consumer.consumer_id, PeerRecord(key_fingerprint=consumer.key_fingerprint, refused=False)
        )
        certificate, expires_at = signed_certificate(consumer.csr_pem, other_key=self.other_key)
        return Issued(
            api_server_url="https://127.0.0.1:6443",
            ca_pem="CA PEM",
            certificate_pem=certificate,
            namespace=names.tenant_namespace(consumer.consumer_id),
            expires_at=expires_at,
        )


@dataclass
class FakeEnrolments:
    """The provider's tokens in memory, used up as the real ones are; what the endpoint asked, recorded."""

    tokens: dict[str, EnrolmentToken] = field(default_factory=dict)
    full: Refusal | None = None
    error: Exception | None = None
    reads: list[str] = field(default_factory=list)
    counts: int = 0
    consumed: list[str] = field(default_factory=list)
    restored: list[str] = field(default_factory=list)
    settled: list[tuple[str, str]] = field(default_factory=list)
    lose_races: bool = False

    def mint(self, token: str, *, expires_at: datetime.datetime | None = None) -> EnrolmentToken:
        fingerprint = enrolment_key(token).fingerprint
        expiry = expires_at or datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)
        recorded = EnrolmentToken(
            id=token_id(fingerprint), fingerprint=fingerprint, expires_at=expiry, created_at=None, uid="u"
        )
        self.tokens[fingerprint] = recorded
        return recorded

    async def find(self, fingerprint: str) -> EnrolmentToken | None:
        self.reads.append(fingerprint)
        if self.error:
            raise self.error
        return self.tokens.get(fingerprint)

    async def refusal(self) -> Refusal | None:
        self.counts += 1
        return self.full

    async def consume(self, token: EnrolmentToken) -> bool:
        if self.lose_races or self.tokens.pop(token.fingerprint, None) is None:
            return False
        self.consumed.append(token.id)
        return True

    async def restore(self, token: EnrolmentToken) -> None:
        self.tokens[token.fingerprint] = token
        self.restored.append(token.id)

    async def settle(self, consumer_id: str, *, key_fingerprint: str) -> None:
        self.settled.append((consumer_id, key_fingerprint))


@dataclass
class FakeCaches:
    """What the provisioner and enrolments read, listed (or not yet); run while the app runs."""

    has_synced: bool = True
    running: bool = False

    async def run(self) -> None:
        self.running = True
        try:
            await asyncio.Event().wait()
        finally:
            self.running = False


def enrolments_with(token: str = TOKEN) -> FakeEnrolments:
    enrolments = FakeEnrolments()
    enrolments.mint(token)
    return enrolments


@dataclass
class Server:
    url: str
    provisioner: FakeProvisioner
    nonces: NonceStore
    enrolments: FakeEnrolments
    caches: FakeCaches
    session: aiohttp.ClientSession

    async def post(self, path: str, body: Any) -> tuple[int, dict[str, Any]]:
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        async with self.session.post(self.url + path, data=data) as response:
            return response.status, orjson.loads(await response.read() or b"{}")

    async def nonce(self) -> str:
        status, answer = await self.post("/nonce", b"")
        assert status == 200
        assert answer["expiresIn"] == 60
        return str(answer["nonce"])

    async def signed(
        self,
        *,
        token: str | None = TOKEN,
        key: ClusterKey = CONSUMER_KEY,
        csr: str | None = None,
        consumer: str = CONSUMER,
        **overrides: Any,
    ) -> dict[str, Any]:
        """A request for /identity, signed with ``key`` (and ``token``) after ``overrides`` are applied."""
        message = {
            "clusterID": consumer,
            "clusterName": "consumer",
            "nonce": await self.nonce(),
            "csr": csr or make_csr(consumer)[1],
            "publicKey": key.public_pem,
            "network": CONSUMER_NETWORK.to_message(),
        } | overrides
        return sign_request(message, key=key, token=token)


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(app: web.Application, *, ssl_context: ssl.SSLContext | None = None) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ssl_context).start()
    port = runner.addresses[0][1]
    return runner, f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"


GENEROUS = RateLimit(burst=10_000, per_second=1_000.0)
"""A limit no test but those of the limit itself reaches."""


def make_app(
    provisioner: FakeProvisioner,
    nonces: NonceStore,
    enrolments: FakeEnrolments,
    middlewares: tuple[Middleware, ...] = (),
    *,
    key: ClusterKey = PROVIDER_KEY,
    caches: FakeCaches | None = None,
    limiter: SourceLimiter | None = None,
) -> web.Application:
    app = auth_app(
        cluster_id=PROVIDER,
        cluster_name="provider",
        key=key,
        network=PROVIDER_NETWORK,
        enrolments=enrolments,
        provisioner=provisioner,
        caches=FakeCaches() if caches is None else caches,
        nonces=nonces,
        limiter=GENEROUS.limiter() if limiter is None else limiter,
    )
    app.middlewares.extend(middlewares)
    return app


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def server(clock: Clock) -> AsyncIterator[Server]:
    provisioner, nonces, enrolments, caches = (
        FakeProvisioner(),
        NonceStore(clock=clock),
        enrolments_with(TOKEN),
        FakeCaches(),
    )
    runner, url = await serve(make_app(provisioner, nonces, enrolments, caches=caches))
    async with aiohttp.ClientSession() as session:
        yield Server(url, provisioner, nonces, enrolments, caches, session)
    await runner.cleanup()


async def handshake(
    url: str,
    *,
    token: str | None = TOKEN,
    key: ClusterKey = CONSUMER_KEY,
    expected: str = PROVIDER,
    fingerprint: str = PROVIDER_KEY.fingerprint,
    consumer: str = CONSUMER,
) -> authclient.Identity:
    return await authclient.request_identity(
        auth_url=url,
        key=key,
        token=token,
        consumer_id=consumer,
        consumer_name="consumer",
        consumer_network=CONSUMER_NETWORK,
        consumer_auth_url="https://consumer.example:8443",
        expected_provider_id=expected,
        expected_fingerprint=fingerprint,
    )


# -- the happy path ----------------------------------------------------------------------------------------


async def test_ids_tell_who_the_provider_claims_to_be(server: Server) -> None:
    ids = await authclient.fetch_ids(server.url)
    assert (ids.cluster_id, ids.cluster_name, ids.key_fingerprint) == (PROVIDER, "provider", PROVIDER_KEY.fingerprint)


async def test_a_consumer_with_the_token_gets_an_identity(server: Server) -> None:
    identity = await handshake(server.url + "/")
    assert server.provisioner.calls == [
        {
            "consumer_id": CONSUMER,
            "consumer_name": "consumer",
            "auth_url": "https://consumer.example:8443",
            "network": CONSUMER_NETWORK,
        }
    ]
    assert (identity.provider_id, identity.provider_name) == (PROVIDER, "provider")
    assert identity.provider_network == PROVIDER_NETWORK
    assert identity.namespace == names.tenant_namespace(CONSUMER)
    assert identity.api_server_url == "https://127.0.0.1:6443"
    cert = x509.load_pem_x509_certificate(identity.cert_pem.encode())
    assert identity.expires_at == cert.not_valid_after_utc
    assert "key_pem" not in repr(identity)
    access = load_dict(identity.kubeconfig())
    assert access.server == "https://127.0.0.1:6443"
    assert (access.ca_pem, access.cert_pem, access.key_pem) == ("CA PEM", identity.cert_pem, identity.key_pem)
    assert server.provisioner.records[CONSUMER].key_fingerprint == CONSUMER_KEY.fingerprint


async def test_an_enrolled_consumer_renews_with_its_key_alone(server: Server) -> None:
    """Its token is used up by its enrolment: a known key needs none, and nothing about tokens is even read."""
    await handshake(server.url)
    assert server.enrolments.consumed == [token_id(enrolment_key(TOKEN).fingerprint)]
    await handshake(server.url, token=None)
    await handshake(server.url, token=TOKEN)  # still carried, used up: no matter
    await handshake(server.url, token="some-other-token")
    assert len(server.provisioner.calls) == 4
    assert (len(server.enrolments.reads), server.enrolments.counts) == (1, 1)


async def test_a_new_consumer_needs_a_token(server: Server) -> None:
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(server.url, token=None)
    assert caught.value.status == 401
    assert "enrolling needs a token" in caught.value.reason
    assert server.enrolments.reads == []  # no token, no read
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(server.url, token="not-the-token")
    assert caught.value.status == 401
    assert caught.value.reason == UNKNOWN_TOKEN
    assert (len(server.enrolments.reads), server.enrolments.counts) == (1, 0)  # one read by name, no count
    assert server.provisioner.calls == []
    assert CONSUMER not in server.provisioner.records
    assert server.enrolments.consumed == []


async def test_a_token_enrols_one_cluster_once(server: Server) -> None:
    await handshake(server.url)
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(server.url, consumer=OTHER_CONSUMER, key=INTRUDER_KEY)
    assert (caught.value.status, caught.value.reason) == (401, UNKNOWN_TOKEN)
    assert "already used" in caught.value.reason
    assert [call["consumer_id"] for call in server.provisioner.calls] == [CONSUMER]


async def test_an_expired_token_is_401_saying_when_and_is_not_used_up(server: Server) -> None:
    expired = server.enrolments.mint(
        "an-old-token", expires_at=datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    )
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(server.url, token="an-old-token")
    assert caught.value.status == 401
    assert "the enrolment token expired at 2025-01-02T03:04:05Z" in caught.value.reason
    assert (server.provisioner.calls, server.enrolments.consumed, server.enrolments.counts) == ([], [], 0)
    assert server.enrolments.tokens[expired.fingerprint] == expired


@pytest.mark.parametrize("status", [429, 403])
async def test_over_a_cap_the_consumer_is_told_why_and_nothing_is_done(server: Server, status: int) -> None:
    server.enrolments.full = Refusal(status, "this cluster has 3 consumer(s) enrolled that have not accepted")
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(server.url)
    assert (caught.value.status, caught.value.reason) == (status, server.enrolments.full.reason)
    assert not isinstance(caught.value, authclient.ProviderBusy)  # a cap lasts: a verdict, not a wait
    assert (server.provisioner.calls, server.enrolments.consumed) == ([], [])
    server.enrolments.full = None
    await handshake(server.url)  # its token still enrols it once there is room


async def test_of_two_enrolments_racing_with_one_token_the_loser_is_401(server: Server) -> None:
    server.enrolments.lose_races = True
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(server.url)
    assert (caught.value.status, caught.value.reason) == (401, UNKNOWN_TOKEN)
    assert server.provisioner.calls == []


@pytest.mark.parametrize("error", [ProvisioningError("no certificate within 30 s"), PeerDenied("a policy")])
async def test_a_failed_enrolment_gives_its_token_back(server: Server, error: Exception) -> None:
    server.provisioner.error = error
    with pytest.raises(authclient.AuthRejected):
        await handshake(server.url)
    assert server.enrolments.restored == server.enrolments.consumed == [token_id(enrolment_key(TOKEN).fingerprint)]
    server.provisioner.error = None
    await handshake(server.url)


async def test_tokens_that_cannot_be_read_are_503_and_enrolled_consumers_go_on(server: Server) -> None:
    await handshake(server.url)
    server.enrolments.error = RuntimeError("the API server is away")
    await handshake(server.url)
    status, answer = await server.post("/identity", await server.signed(consumer=OTHER_CONSUMER))
    assert (status, answer["reason"]) == (503, "the provider cannot check enrolment tokens right now; retry later")
    assert len(server.provisioner.calls) == 2


async def test_an_enrolment_is_answered_once_the_caches_count_it_and_a_renewal_waits_for_nothing(
    server: Server,
) -> None:
    await handshake(server.url)
    assert server.enrolments.settled == [(CONSUMER, CONSUMER_KEY.fingerprint)]
    await handshake(server.url, token=None)
    assert server.enrolments.settled == [(CONSUMER, CONSUMER_KEY.fingerprint)]


async def test_until_the_caches_have_listed_a_handshake_is_503_after_the_cheap_checks(server: Server) -> None:
    """What the provider knows of consumers is not loaded yet: it says so rather than guess (no API call instead)."""
    assert server.caches.running  # run for as long as the endpoint serves
    server.caches.has_synced = False
    status, answer = await server.post("/identity", await server.signed())
    assert (status, answer["reason"]) == (503, NOT_SYNCED)
    forged = await server.signed()
    status, _ = await server.post("/identity", forged | {"clusterName": "tampered"})
    assert status == 401  # a stranger is refused as ever
    assert (server.provisioner.lookups, server.enrolments.reads, server.provisioner.calls) == ([], [], [])
    server.caches.has_synced = True
    await handshake(server.url)


async def test_the_client_does_not_need_to_trust_the_auth_servers_certificate(tmp_path: Path) -> None:
    ca = pki.make_ca("self-signed")
    leaf = pki.issue(ca, common_name="auth", ip_addresses=["127.0.0.1"], server=True)
    pki.write_private(tmp_path / "tls.pem", leaf.cert + leaf.key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.pem")
    runner, url = await serve(make_app(FakeProvisioner(), NonceStore(), enrolments_with(TOKEN)), ssl_context=context)
    try:
        assert url.startswith("https://")
        assert (await handshake(url)).provider_id == PROVIDER
    finally:
        await runner.cleanup()


# -- what the server refuses -------------------------------------------------------------------------------


async def test_another_key_claiming_a_known_cluster_id_is_403_and_provisions_nothing(server: Server) -> None:
    """A holder of the token cannot become another consumer: the ID's pinned key decides."""
    await handshake(server.url)
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(server.url, key=INTRUDER_KEY)
    assert caught.value.status == 403
    assert "another key is registered for cluster ID" in caught.value.reason
    assert len(server.provisioner.calls) == 1
    assert server.provisioner.records[CONSUMER].key_fingerprint == CONSUMER_KEY.fingerprint


async def test_a_refused_consumer_is_403_with_the_token_and_its_own_key(server: Server) -> None:
    server.provisioner.records[CONSUMER] = PeerRecord(key_fingerprint=CONSUMER_KEY.fingerprint, refused=True)
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(server.url)
    assert caught.value.status == 403
    assert "does not accept cluster" in caught.value.reason
    assert server.provisioner.calls == []


async def test_a_refused_cluster_id_without_a_key_stays_refused_for_anyone(server: Server) -> None:
    server.provisioner.records[CONSUMER] = PeerRecord(key_fingerprint=None, refused=True)
    with pytest.raises(authclient.AuthRejected, match=r"\(403\)"):
        await handshake(server.url, key=INTRUDER_KEY)
    assert server.provisioner.calls == []


async def test_a_missing_key_signature_is_401(server: Server) -> None:
    message = await server.signed()
    del message[KEY_SIGNATURE]
    status, answer = await server.post("/identity", message)
    assert (status, answer["reason"]) == (401, "the request is not signed by the key it presents (or was altered)")
    assert (server.provisioner.calls, server.provisioner.lookups) == ([], [])


async def test_a_request_signed_by_another_key_than_it_presents_is_401(server: Server) -> None:
    message = await server.signed(key=INTRUDER_KEY) | {"publicKey": CONSUMER_KEY.public_pem}
    status, _ = await server.post("/identity", message)
    assert status == 401
    assert (server.provisioner.calls, server.provisioner.lookups) == ([], [])


@pytest.mark.parametrize("signature", [None, 1, "", "AAAA"])
async def test_a_malformed_signature_is_401(server: Server, signature: object) -> None:
    message = await server.signed() | {KEY_SIGNATURE: signature}
    status, _ = await server.post("/identity", message)
    assert status == 401
    assert (server.provisioner.calls, server.provisioner.lookups) == ([], [])


@pytest.mark.parametrize(
    ("field", "value"),
    [("clusterName", "someone-else"), ("clusterID", "b1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"), ("authURL", "https://x")],
)
async def test_a_tampered_field_is_401(server: Server, field: str, value: str) -> None:
    message = await server.signed() | {field: value}
    status, answer = await server.post("/identity", message)
    if field == "clusterID":
        assert status == 400  # the CSR is for the other ID: refused before any signature is checked
    else:
        assert (status, answer["reason"]) == (401, "the request is not signed by the key it presents (or was altered)")
    assert (server.provisioner.calls, server.provisioner.lookups) == ([], [])


async def test_a_tampered_csr_is_401_not_400(server: Server) -> None:
    message = await server.signed() | {"csr": make_csr(CONSUMER)[1]}
    status, _ = await server.post("/identity", message)
    assert status == 401


async def test_a_token_signature_over_a_tampered_request_is_401(server: Server) -> None:
    """Signed by the key after a field changed, with the token's signature of the original: an altered request."""
    original = await server.signed()
    altered = sign_request(
        {k: v for k, v in original.items() if k not in (KEY_SIGNATURE, TOKEN_SIGNATURE)} | {"clusterName": "x"},
        key=CONSUMER_KEY,
        token=None,
    ) | {TOKEN_SIGNATURE: original[TOKEN_SIGNATURE]}
    status, answer = await server.post("/identity", altered)
    assert status == 401
    assert "bad token signature" in answer["reason"]
    assert server.provisioner.calls == []


async def test_a_replayed_request_is_401(server: Server) -> None:
    message = await server.signed()
    status, _ = await server.post("/identity", message)
    assert status == 200
    assert await server.post("/identity", message) == (401, {"reason": "unknown, expired or already used nonce"})
    assert len(server.provisioner.calls) == 1


async def test_a_nonce_the_server_never_issued_is_401(server: Server) -> None:
    message = {
        "clusterID": CONSUMER,
        "clusterName": "consumer",
        "nonce": "made-up",
        "csr": make_csr(CONSUMER)[1],
        "publicKey": CONSUMER_KEY.public_pem,
        "network": CONSUMER_NETWORK.to_message(),
    }
    status, _ = await server.post("/identity", sign_request(message, key=CONSUMER_KEY, token=TOKEN))
    assert status == 401
    assert (server.provisioner.calls, server.provisioner.lookups) == ([], [])


async def test_an_expired_nonce_is_401(server: Server, clock: Clock) -> None:
    message = await server.signed()
    clock.now += 60
    status, _ = await server.post("/identity", message)
    assert status == 401
    assert server.provisioner.calls == []


@pytest.mark.parametrize(
    "csr", ["garbage", "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----"]
)
async def test_a_malformed_csr_is_400(server: Server, csr: str) -> None:
    status, answer = await server.post("/identity", await server.signed(csr=csr))
    assert (status, answer["reason"]) == (400, "'csr' is not a PEM certificate signing request")
    assert server.provisioner.calls == []


async def test_a_csr_for_system_masters_or_another_peer_is_400(server: Server) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    for attributes in (
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"), *_cn(CONSUMER)],
        _cn("some-other-peer"),
    ):
        csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attributes)).sign(key, hashes.SHA256())
        pem = csr.public_bytes(serialization.Encoding.PEM).decode()
        status, answer = await server.post("/identity", await server.signed(csr=pem))
        assert status == 400
        assert "subject must be exactly" in answer["reason"]
    assert server.provisioner.calls == []


def _cn(cluster_id: str) -> list[x509.NameAttribute[str]]:
    return [x509.NameAttribute(NameOID.COMMON_NAME, names.peer_user(cluster_id))]


@pytest.mark.parametrize("body", [b"{not json", b"[1]", b""])
async def test_malformed_json_is_400(server: Server, body: bytes) -> None:
    status, _ = await server.post("/identity", body)
    assert status == 400


async def test_a_signed_request_missing_a_field_is_400_and_names_it(server: Server) -> None:
    message = await server.signed()
    del message["clusterName"]
    message = sign_request(message, key=CONSUMER_KEY, token=TOKEN)
    assert await server.post("/identity", message) == (400, {"reason": "'clusterName' must be a non-empty string"})


@pytest.mark.parametrize(
    "name",
    [
        "evil\n2026-01-01 INFO forged line\x1b[2J",
        "\x1b]0;owned\x07",
        "rome\r",
        "rome\x85",  # C1: NEL
        "emor\u202e",  # right-to-left override
        "rome\u2028milan",  # line separator
        "rome\u200b",  # zero width space
    ],
)
async def test_a_name_with_unprintable_characters_is_400_naming_the_field_and_nothing_is_looked_up(
    server: Server, name: str
) -> None:
    """It would write a line of its own in the provider's log, or move the terminal of whoever reads it."""
    status, answer = await server.post("/identity", await server.signed(clusterName=name))
    assert status == 400
    assert answer["reason"].startswith("'clusterName' must be printable text: it holds U+"), answer
    assert name not in answer["reason"]
    assert (server.provisioner.lookups, server.enrolments.reads) == ([], [])


async def test_a_name_in_any_script_with_spaces_is_a_name() -> None:
    """Printable is not ASCII: a cluster may be called ``Milano città`` or ``東京 1``."""
    provisioner, enrolments = FakeProvisioner(), enrolments_with(TOKEN)
    runner, url = await serve(make_app(provisioner, NonceStore(), enrolments))
    try:
        async with aiohttp.ClientSession() as session:
            server = Server(url, provisioner, NonceStore(), enrolments, FakeCaches(), session)
            for name in ("Milano città", "東京 1", "rome\u00a0east"):
                status, _ = await server.post("/identity", await server.signed(clusterName=name))
                assert status == 200
                enrolments.mint(TOKEN)
    finally:
        await runner.cleanup()
    assert [call["consumer_name"] for call in provisioner.calls] == ["Milano città", "東京 1", "rome\u00a0east"]


@pytest.mark.parametrize(
    ("network", "complaint"),
    [
        (None, "'network' must be an object with 'podCIDR' and 'serviceCIDR'"),
        ({"podCIDR": "10.244.0.0/16"}, "'network.serviceCIDR' must be a CIDR such as 10.244.0.0/16"),
        ({"podCIDR": "10.244.0.0/16", "serviceCIDR": "a" * 5000}, "'network.serviceCIDR' is longer than 43"),
        ({"podCIDR": "10.244.0.0/16", "serviceCIDR": "10.96.0.0/33"}, "'10.96.0.0/33' is not a CIDR"),
        ({"podCIDR": "169.254.0.0/16", "serviceCIDR": "10.96.0.0/16"}, "overlaps the special-purpose range"),
        ({"podCIDR": "10.244.0.0/16", "serviceCIDR": "10.96.0.0/16", "x": 1}, "'network' has unknown fields: 'x'"),
    ],
)
async def test_a_signed_request_with_a_malformed_network_is_400_and_nothing_is_looked_up(
    server: Server, network: object, complaint: str
) -> None:
    """Signed with the consumer's key and the token, as a peer holding both would send it: refused all the same."""
    status, answer = await server.post("/identity", await server.signed(network=network))
    assert status == 400
    assert complaint in answer["reason"]
    assert server.provisioner.lookups == []
    assert server.provisioner.calls == []


async def test_the_client_refuses_a_signed_answer_with_a_malformed_network() -> None:
    """A provider (its own key, its own signature) telling an implausible network: refused, nothing kept."""

    @web.middleware
    async def lie(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if request.path == "/identity" and isinstance(response, web.Response) and response.status == 200:
            nonce = orjson.loads(await request.read())["nonce"]
            answer = orjson.loads(_body(response))
            answer["network"] = {"podCIDR": "127.0.0.0/8", "serviceCIDR": "10.96.0.0/16"}
            return web.json_response(sign_answer(answer, key=PROVIDER_KEY, nonce=nonce))
        return response

    runner, url = await serve(make_app(FakeProvisioner(), NonceStore(), enrolments_with(TOKEN), (lie,)))
    try:
        with pytest.raises(
            authclient.BadAnswer, match=r"'network\.podCIDR': 127\.0\.0\.0/8 overlaps the special-purpose"
        ):
            await handshake(url)
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("cluster_id", ["../../kube-system", "rome", "a" * 51])
async def test_a_cluster_id_that_is_not_one_is_400(server: Server, cluster_id: str) -> None:
    status, answer = await server.post("/identity", await server.signed(clusterID=cluster_id))
    assert status == 400
    assert "must be a cluster ID" in answer["reason"]
    assert server.provisioner.lookups == []


async def test_an_oversized_body_is_413(server: Server) -> None:
    status, answer = await server.post("/identity", await server.signed(clusterName="x" * MAX_BODY))
    assert (status, answer["reason"]) == (413, f"the body is larger than {MAX_BODY} bytes")
    assert server.provisioner.calls == []


async def test_a_denied_peer_gets_403_with_the_reason(server: Server) -> None:
    server.provisioner.error = PeerDenied("SharingPolicy deny-all")
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(server.url)
    assert caught.value.status == 403
    assert caught.value.reason == "provider refuses consumer: SharingPolicy deny-all"


async def test_provisioning_errors_are_500_and_only_safe_ones_are_told(server: Server) -> None:
    server.provisioner.error = ProvisioningError("no certificate within 30 s")
    with pytest.raises(authclient.AuthRejected, match=r"\(500\): no certificate within 30 s"):
        await handshake(server.url)
    server.provisioner.error = RuntimeError("internal detail")
    with pytest.raises(authclient.AuthRejected) as caught:
        await handshake(server.url)
    assert caught.value.status == 500
    assert "internal detail" not in caught.value.reason


async def test_what_passes_by_itself_is_503_with_retry_after_and_the_client_waits_not_gives_up(server: Server) -> None:
    """An unpeer still releasing the tenant namespace is no refusal: the consumer asks again in seconds."""
    server.provisioner.error = ProvisioningBusy("namespace liqo-tenant-x is being deleted (an unpeer); retry later")
    with pytest.raises(authclient.ProviderBusy, match=r"\(503\): namespace liqo-tenant-x is being deleted") as caught:
        await handshake(server.url)
    assert caught.value.retry_after == 2.0
    server.provisioner.error = None
    await handshake(server.url)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        *[("2", 2.0), (" 7 ", 7.0), ("0", 1.0), ("86400", authclient.MAX_RETRY_AFTER), (None, None), ("", None)],
        *[("²", None), ("1.5", None), ("-3", None), ("Wed, 21 Oct 2015 07:28:00 GMT", None), ("9" * 40, None)],
    ],
)
def test_retry_after_is_ascii_seconds_within_bounds(header: str | None, seconds: float | None) -> None:
    assert authclient.retry_after(header) == seconds


async def test_the_provisioner_gets_the_csr_as_checked_and_nothing_else(server: Server) -> None:
    """Text around the PEM block, or a second block, never reaches the API server's own parser."""
    csr = make_csr(CONSUMER)[1]
    smuggled = make_csr("b1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d")[1]
    status, _ = await server.post("/identity", await server.signed(csr=f"hello\n{csr}{smuggled}"))
    assert status == 200
    assert server.provisioner.csrs == [csr]


async def test_healthz_answers_probes(server: Server) -> None:
    async with server.session.get(server.url + "/healthz") as response:
        assert (response.status, await response.text()) == (200, "ok")


async def test_logs_carry_no_secrets(server: Server, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    message = await server.signed()
    status, answer = await server.post("/identity", message)
    assert status == 200
    await server.post("/identity", message)  # a replay
    await server.post("/identity", message | {"clusterName": "tampered"})
    assert "identity issued to consumer" in caplog.text
    assert "refused (401)" in caplog.text
    secrets = [TOKEN, message[TOKEN_SIGNATURE], message[KEY_SIGNATURE], message["nonce"], answer["signature"]]
    secrets += [message["csr"].splitlines()[1], answer["certificate"].splitlines()[1]]
    for secret in secrets:
        assert secret not in caplog.text


# -- how much a source may ask -----------------------------------------------------------------------------


@pytest.fixture
async def throttled(clock: Clock) -> AsyncIterator[tuple[str, FakeProvisioner, NonceStore]]:
    """An endpoint letting each source make 3 requests at once, then one every 2 s (the clock is the test's)."""
    provisioner, nonces = FakeProvisioner(), NonceStore(clock=clock)
    limiter = SourceLimiter(rate=0.5, burst=3, clock=clock)
    runner, url = await serve(make_app(provisioner, nonces, enrolments_with(TOKEN), limiter=limiter))
    yield url, provisioner, nonces
    await runner.cleanup()


def from_address(source: str) -> aiohttp.ClientSession:
    """A client at another loopback address: another source to a server on 127.0.0.1."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(source, 0)))


async def test_past_its_burst_a_source_is_429_before_anything_else_and_other_sources_are_served(
    throttled: tuple[str, FakeProvisioner, NonceStore], clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    url, provisioner, nonces = throttled
    caplog.set_level(logging.DEBUG, logger="liqo.peering.authserver")
    async with from_address("127.0.0.2") as flooder, from_address("127.0.0.3") as other:
        for _ in range(3):
            async with flooder.post(f"{url}/nonce") as response:
                assert response.status == 200
        for path, body in (("/nonce", b""), ("/identity", b"not json"), ("/identity", b"x" * (MAX_BODY + 1))):
            async with flooder.post(url + path, data=body) as response:
                assert response.status == 429  # not 400, not 413: nothing of the request was read
                assert response.headers["Retry-After"] == "2"
                assert (await response.json())["reason"] == (
                    "too many requests from 127.0.0.2: at most 3 at once and 0.5 a second from one address;"
                    " retry in 2 s"
                )
        assert len(nonces) == 3  # the refused asked for none
        assert provisioner.lookups == []
        async with flooder.get(f"{url}/ids") as response:
            assert response.status == 200  # what costs nothing is not limited
        async with other.post(f"{url}/nonce") as response:
            assert response.status == 200
        async with other.post(f"{url}/identity", data=b"not json") as response:
            assert response.status == 400
        clock.now += 2.0  # a token more for each
        async with flooder.post(f"{url}/nonce") as response:
            assert response.status == 200
    refusals = [r for r in caplog.records if "too many requests" in r.getMessage()]
    assert [r.levelno for r in refusals] == [logging.INFO, logging.DEBUG, logging.DEBUG]  # one line per flood


@pytest.mark.parametrize(
    ("remote", "source"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),  # the same host, another address of its /64
        ("fe80::1%eth0", "fe80::/64"),
        (None, "unknown"),
        ("not an address", "unknown"),
    ],
)
def test_a_source_is_an_address_and_an_ipv6_host_is_its_64(remote: str | None, source: str) -> None:
    assert source_of(remote) == source


# -- what the client refuses -------------------------------------------------------------------------------


@web.middleware
async def tamper(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A man in the middle who points the consumer at another API server."""
    response = await handler(request)
    if request.path == "/identity" and isinstance(response, web.Response) and response.status == 200:
        answer = orjson.loads(_body(response))
        answer["apiServerURL"] = "https://attacker.example:6443"
        return web.Response(body=orjson.dumps(answer), content_type="application/json")
    return response


def _body(response: web.Response) -> bytes:
    assert isinstance(response.body, bytes)
    return response.body


async def test_the_client_refuses_a_tampered_answer() -> None:
    runner, url = await serve(make_app(FakeProvisioner(), NonceStore(), enrolments_with(TOKEN), (tamper,)))
    try:
        with pytest.raises(authclient.ProviderNotAuthenticated, match="not signed by the provider's key"):
            await handshake(url)
    finally:
        await runner.cleanup()


async def test_the_client_refuses_an_answer_to_another_request() -> None:
    """A man in the middle replays a genuine answer to an earlier request: the nonce binding catches it."""
    recorded: list[bytes] = []

    @web.middleware
    async def replay(request: web.Request, handler: Handler) -> web.StreamResponse:
        response = await handler(request)
        if request.path == "/identity" and isinstance(response, web.Response):
            recorded.append(_body(response))
            return web.Response(body=recorded[0], content_type="application/json")
        return response

    runner, url = await serve(make_app(FakeProvisioner(), NonceStore(), enrolments_with(TOKEN), (replay,)))
    try:
        await handshake(url)
        with pytest.raises(authclient.ProviderNotAuthenticated, match="not signed by the provider's key"):
            await handshake(url)
    finally:
        await runner.cleanup()


async def test_the_client_refuses_an_answer_from_another_provider(server: Server) -> None:
    with pytest.raises(authclient.BadAnswer, match="not the expected"):
        await handshake(server.url, expected="some-other-provider")


async def test_a_fake_provider_holding_the_token_is_refused() -> None:
    """Anyone with the token can run an endpoint that answers well-formed answers: not signed by the
    provider's key, they are refused, and the consumer never trusts its API server."""
    runner, url = await serve(make_app(FakeProvisioner(), NonceStore(), enrolments_with(TOKEN), key=INTRUDER_KEY))
    try:
        with pytest.raises(authclient.ProviderNotAuthenticated, match="not the provider's"):
            await handshake(url)
    finally:
        await runner.cleanup()


async def test_the_client_refuses_a_certificate_for_another_key(server: Server) -> None:
    server.provisioner.other_key = True
    with pytest.raises(authclient.BadAnswer, match="not for the key we sent"):
        await handshake(server.url)


async def test_an_unsigned_answer_is_refused() -> None:
    """Well-formed, presenting the provider's public key (public, anyone has it), but not signed with it."""

    async def identity(request: web.Request) -> web.Response:
        csr = orjson.loads(await request.read())["csr"]
        certificate, expires = signed_certificate(csr)
        answer = {
            "clusterID": PROVIDER,
            "clusterName": "provider",
            "apiServerURL": "https://attacker.example:6443",
            "ca": "",
            "certificate": certificate,
            "namespace": names.tenant_namespace(CONSUMER),
            "expiresAt": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "publicKey": PROVIDER_KEY.public_pem,
            "network": PROVIDER_NETWORK.to_message(),
        }
        return web.json_response(answer)

    async def nonce(_: web.Request) -> web.Response:
        return web.json_response({"nonce": "n", "expiresIn": 60})

    app = web.Application()
    app.router.add_post("/nonce", nonce)
    app.router.add_post("/identity", identity)
    runner, url = await serve(app)
    try:
        with pytest.raises(authclient.ProviderNotAuthenticated, match="not signed by the provider's key"):
            await handshake(url)
    finally:
        await runner.cleanup()


async def test_an_unreachable_endpoint_is_a_clear_error() -> None:
    runner, url = await serve(web.Application())
    await runner.cleanup()  # the port is now closed
    with pytest.raises(authclient.AuthUnreachable, match="cannot reach"):
        await handshake(url)
