"""Certificates signed by the cluster: the requests, the approval of our own only, renewal, the swap."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube import csr, pki
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, ConflictError, GoneError, NotFoundError, UnreachableError
from liqo.kube.resources import CSRS

ME = "system:serviceaccount:liqo:liqo-virtual-kubelet"
UTC = datetime.UTC
T0 = datetime.datetime(2030, 1, 1, tzinfo=UTC)


# -- the request ---------------------------------------------------------------------------------------

ips = st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)).map(str)
node_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?", fullmatch=True)


@given(node=node_names, addresses=st.lists(ips, min_size=1, max_size=3, unique=True))
def test_a_kubelet_serving_request_is_what_the_signer_accepts_for_our_key(node: str, addresses: list[str]) -> None:
    key_pem, csr_pem = csr.kubelet_serving_request(node_name=node, ip_addresses=addresses)
    request = x509.load_pem_x509_csr(csr_pem.encode())
    assert request.is_signature_valid
    assert [(a.oid, a.value) for a in request.subject] == [
        (NameOID.ORGANIZATION_NAME, "system:nodes"),
        (NameOID.COMMON_NAME, f"system:node:{node}"),
    ]
    sans = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address(a) for a in addresses]
    assert sans.get_values_for_type(x509.DNSName) == []
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    assert spki(request.public_key()) == spki(key.public_key())


def spki(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def test_a_request_without_addresses_has_no_alternative_names_and_a_bad_address_is_refused() -> None:
    _, csr_pem = csr.make_request(common_name="liqo.io:peer:x")
    request = x509.load_pem_x509_csr(csr_pem.encode())
    assert [(a.oid, a.value) for a in request.subject] == [(NameOID.COMMON_NAME, "liqo.io:peer:x")]
    assert len(request.extensions) == 0
    with pytest.raises(ValueError, match="does not appear to be an IPv4 or IPv6 address"):
        csr.kubelet_serving_request(node_name="n", ip_addresses=["node-1.example"])


def test_the_csr_object_asks_the_signer_for_the_lifetime_with_our_labels() -> None:
    manifest = csr.csr_object(
        csr_pem="PEM",
        signer=csr.KUBELET_SERVING_SIGNER,
        usages=csr.KUBELET_SERVING_USAGES,
        expiration_seconds=86400,
        generate_name="liqo-virtual-kubelet-",
        labels={"app.kubernetes.io/managed-by": "liqo"},
    )
    assert manifest == {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "liqo-virtual-kubelet-", "labels": {"app.kubernetes.io/managed-by": "liqo"}},
        "spec": {
            "request": base64.b64encode(b"PEM").decode(),
            "signerName": "kubernetes.io/kubelet-serving",
            "expirationSeconds": 86400,
            "usages": ["digital signature", "key encipherment", "server auth"],
        },
    }


def asked() -> dict[str, Any]:
    return csr.csr_object(
        csr_pem="PEM",
        signer=csr.KUBELET_SERVING_SIGNER,
        usages=csr.KUBELET_SERVING_USAGES,
        expiration_seconds=600,
        generate_name="g-",
        labels={},
    )


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"username": "mallory"}, "requested by 'mallory', not by us"),
        ({"username": None}, "requested by None, not by us"),
        ({"request": base64.b64encode(b"OTHER").decode()}, "its request is not the one we sent"),
        ({"signerName": csr.CLIENT_SIGNER}, "its signerName is not the one we sent"),
    ],
)
def test_a_request_is_ours_only_if_we_asked_for_exactly_it(change: dict[str, Any], why: str) -> None:
    ours = {"metadata": {"name": "g-1"}, "spec": asked()["spec"] | {"username": ME}}
    assert csr.not_ours(ours, asked=asked(), username=ME) is None
    theirs = ours | {"spec": ours["spec"] | change}
    assert (csr.not_ours(theirs, asked=asked(), username=ME) or "").startswith(why)


def test_approval_adds_a_condition_and_keeps_the_rest() -> None:
    request = {"metadata": {"name": "x", "resourceVersion": "7"}, "spec": {}, "status": {"conditions": [{"type": "O"}]}}
    out = csr.approved(request, reason="R", message="m")
    assert out["metadata"] == request["metadata"]
    assert out["status"]["conditions"] == [
        {"type": "O"},
        {"type": "Approved", "status": "True", "reason": "R", "message": "m"},
    ]
    assert csr.approved({"metadata": {}}, reason="R", message="m")["status"]["conditions"][0]["type"] == "Approved"


def test_the_certificate_is_read_once_issued_and_a_refusal_names_the_request() -> None:
    assert csr.certificate_of({"status": {}}) is None
    assert csr.certificate_of({}) is None
    assert csr.certificate_of({"status": {"certificate": base64.b64encode(b"CERT").decode()}}) == "CERT"
    denied = {
        "metadata": {"name": "r1"},
        "status": {"conditions": [{"type": "Denied", "status": "True", "message": "no"}]},
    }
    with pytest.raises(csr.SigningError, match="CertificateSigningRequest r1 was denied: no"):
        csr.certificate_of(denied)
    failed = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "SignerValidationFailure"}]}}
    with pytest.raises(csr.SigningError, match="was not signed: SignerValidationFailure"):
        csr.certificate_of(failed)


def pair_for(ip: str = "127.0.0.1", *, ca: pki.KeyPair | None = None) -> csr.CertifiedKey:
    leaf = pki.issue(ca or pki.make_ca("ca"), common_name="system:node:vk", ip_addresses=[ip], server=True)
    return csr.CertifiedKey.from_pem(cert=leaf.cert.decode(), key=leaf.key.decode())


def test_a_certificate_for_another_key_is_refused() -> None:
    pair = pair_for()
    cert = x509.load_pem_x509_certificate(pair.cert.encode())
    assert (pair.not_before, pair.not_after) == (cert.not_valid_before_utc, cert.not_valid_after_utc)
    with pytest.raises(csr.SigningError, match="for another key"):
        csr.CertifiedKey.from_pem(cert=pair.cert, key=pki.key_pem(pki.new_key()).decode())
    with pytest.raises(csr.SigningError, match="does not parse"):
        csr.CertifiedKey.from_pem(cert="garbage", key=pair.key)


# -- when to renew -------------------------------------------------------------------------------------


@given(
    start=st.datetimes(
        min_value=datetime.datetime(2000, 1, 1), max_value=datetime.datetime(2100, 1, 1), timezones=st.just(UTC)
    ),
    lifetime=st.integers(min_value=60, max_value=400 * 86400).map(lambda s: datetime.timedelta(seconds=s)),
    draw=st.floats(min_value=0, max_value=1),
)
def test_renewal_comes_between_a_little_more_than_half_and_two_thirds_of_the_lifetime(
    start: datetime.datetime, lifetime: datetime.timedelta, draw: float
) -> None:
    due = csr.renewal_time(not_before=start, not_after=start + lifetime, draw=draw)
    elapsed = (due - start) / lifetime
    assert csr.RENEW_AFTER - csr.RENEW_JITTER - 1e-6 <= elapsed <= csr.RENEW_AFTER + 1e-6
    assert start < due < start + lifetime


def test_without_a_draw_renewal_is_at_two_thirds() -> None:
    assert csr.renewal_time(not_before=T0, not_after=T0 + datetime.timedelta(hours=24)) == T0 + datetime.timedelta(
        hours=16
    )
    later = csr.renewal_time(not_before=T0, not_after=T0 + datetime.timedelta(hours=24), draw=1)
    assert later == T0 + datetime.timedelta(hours=24) * (2 / 3 - 0.1)


# -- create, check, approve, wait, delete --------------------------------------------------------------


class FakeKube:
    """The API calls of :class:`csr.CsrIssuer`; the stored requester and the signer are scripted."""

    def __init__(self, *, requester: str = ME, events: list[dict[str, Any]] | None = None) -> None:
        self.requester = requester
        self.events = events if events is not None else []
        self.reviews = 0
        self.approvals: list[dict[str, Any]] = []
        self.deleted: list[str] = []
        self.conflict = False

    async def request(self, method: str, path: str, *, body: dict[str, Any]) -> dict[str, Any]:
        assert (method, path, body["kind"]) == (
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            "SelfSubjectReview",
        )
        self.reviews += 1
        return {"status": {"userInfo": {"username": ME, "groups": ["system:authenticated"]}}}

    async def create(self, resource: Any, obj: dict[str, Any]) -> dict[str, Any]:
        assert resource == CSRS
        meta = {"name": obj["metadata"]["generateName"] + "abcde", "resourceVersion": "1"}
        return obj | {"metadata": obj["metadata"] | meta, "spec": obj["spec"] | {"username": self.requester}}

    async def replace(self, resource: Any, obj: dict[str, Any], *, subresource: str) -> dict[str, Any]:
        assert (resource, subresource) == (CSRS, "approval")
        if self.conflict:
            raise ConflictError(409, "Conflict", "the object has been modified")
        self.approvals.append(obj)
        return obj

    async def watch(self, resource: Any, **_: Any) -> AsyncIterator[dict[str, Any]]:
        for event in self.events:
            yield event
        await asyncio.Event().wait()  # a signer that says nothing more

    async def get(self, resource: Any, name: str) -> dict[str, Any]:
        raise NotFoundError(404, "NotFound", name)

    async def delete(self, resource: Any, name: str) -> None:
        self.deleted.append(name)


def issuer(kube: FakeKube, timeout: float = 5) -> csr.CsrIssuer:
    return csr.CsrIssuer(client=cast(KubeClient, kube), timeout=timeout)


def issued(manifest: dict[str, Any], pem: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "g-abcde"},
        "spec": manifest["spec"],
        "status": {"certificate": base64.b64encode(pem.encode()).decode()},
    }


async def test_our_request_is_approved_as_created_and_deleted_once_its_certificate_is_read() -> None:
    kube = FakeKube(
        events=[{"type": "BOOKMARK", "object": {}}, {"type": "MODIFIED", "object": issued(asked(), "CERT")}]
    )
    signer = issuer(kube)
    assert await signer.sign(asked(), reason="R", message="m") == "CERT"
    [approval] = kube.approvals
    assert approval["metadata"] == {"generateName": "g-", "labels": {}, "name": "g-abcde", "resourceVersion": "1"}
    assert approval["status"]["conditions"][-1]["reason"] == "R"
    assert kube.deleted == ["g-abcde"]
    kube.events = [{"type": "MODIFIED", "object": issued(asked(), "CERT2")}]
    assert await signer.sign(asked(), reason="R", message="m") == "CERT2"
    assert kube.reviews == 1  # who we are is asked once


class WatchEndsInError(FakeKube):
    """The first watch ends with the API server's error; the object read afresh carries the certificate."""

    def __init__(self, error: Exception, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.error, self.watches = error, 0

    async def watch(self, resource: Any, **_: Any) -> AsyncIterator[dict[str, Any]]:
        self.watches += 1
        raise self.error
        yield {}  # an async generator

    async def get(self, resource: Any, name: str) -> dict[str, Any]:
        return issued(asked(), "CERT") | {"metadata": {"name": name, "resourceVersion": "7"}}


@pytest.mark.parametrize(
    "error",
    [
        ApiError(500, "InternalError", "etcd event received with PrevKv=nil"),
        GoneError(410, "Expired", "too old resource version"),
    ],
)
async def test_a_watch_ended_by_the_server_is_followed_by_a_fresh_read(error: Exception) -> None:
    kube = WatchEndsInError(error)
    assert await issuer(kube).sign(asked(), reason="R", message="m") == "CERT"
    assert kube.watches == 1


async def test_a_watch_refused_for_the_caller_is_an_error() -> None:
    kube = WatchEndsInError(ApiError(403, "Forbidden", "cannot watch"))
    with pytest.raises(ApiError, match="403"):
        await issuer(kube).sign(asked(), reason="R", message="m")


async def test_a_request_recorded_as_someone_elses_is_never_approved_and_is_deleted() -> None:
    kube = FakeKube(requester="mallory")
    with pytest.raises(csr.SigningError, match=r"g-abcde is not the one we made \(requested by 'mallory'"):
        await issuer(kube).sign(asked(), reason="R", message="m")
    assert kube.approvals == []
    assert kube.deleted == ["g-abcde"]


async def test_a_request_changed_before_the_approval_is_not_approved() -> None:
    kube = FakeKube()
    kube.conflict = True
    with pytest.raises(csr.SigningError, match="changed between its creation and our approval"):
        await issuer(kube).sign(asked(), reason="R", message="m")
    assert kube.deleted == ["g-abcde"]


async def test_a_signer_that_never_signs_is_an_error_naming_the_request_and_what_to_check() -> None:
    kube = FakeKube()
    with pytest.raises(csr.SigningError) as caught:
        await issuer(kube, timeout=0.05).sign(asked(), reason="R", message="m")
    message = str(caught.value)
    assert "CertificateSigningRequest g-abcde was approved but the cluster signed no certificate within 0 s" in message
    assert "kube-controller-manager" in message
    assert "kubernetes.io/kubelet-serving" in message
    assert kube.deleted == ["g-abcde"]


async def test_a_request_deleted_while_pending_is_an_error() -> None:
    kube = FakeKube(events=[{"type": "DELETED", "object": {}}])
    with pytest.raises(csr.SigningError, match="g-abcde was deleted before it was signed"):
        await issuer(kube).sign(asked(), reason="R", message="m")


async def test_a_kubelet_serving_pair_is_our_key_with_the_signers_certificate() -> None:
    ca = pki.make_ca("cluster")

    class Signing(FakeKube):
        async def replace(self, resource: Any, obj: dict[str, Any], *, subresource: str) -> dict[str, Any]:
            approved = await super().replace(resource, obj, subresource=subresource)
            # What kube-controller-manager does: a certificate of the CA for the request's key.
            request = x509.load_pem_x509_csr(base64.b64decode(obj["spec"]["request"]))
            cert = sign_request(ca, request)
            self.events = [{"type": "MODIFIED", "object": issued(obj, cert)}]
            return approved

    kube = Signing()
    pair = await csr.issue_kubelet_serving(
        issuer(kube),
        node_name="liqo-virtual-kubelet",
        ip_addresses=["10.0.0.7"],
        expiration_seconds=600,
        generate_name="liqo-virtual-kubelet-",
        labels={"l": "v"},
    )
    manifest = kube.approvals[0]
    assert manifest["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
    assert manifest["spec"]["expirationSeconds"] == 600
    assert manifest["metadata"]["labels"] == {"l": "v"}
    cert = x509.load_pem_x509_certificate(pair.cert.encode())
    assert cert.subject.rfc4514_string() == "CN=system:node:liqo-virtual-kubelet,O=system:nodes"


def sign_request(ca: pki.KeyPair, request: x509.CertificateSigningRequest) -> str:
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    cert = (
        x509.CertificateBuilder()
        .subject_name(request.subject)
        .issuer_name(ca_cert.subject)
        .public_key(request.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(T0)
        .not_valid_after(T0 + datetime.timedelta(seconds=600))
        .add_extension(request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value, critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


# -- the renewal loop, on a fake clock ------------------------------------------------------------------


class Stop(Exception):
    """Ends a renewal loop in a test (it never returns by itself)."""


class Clock:
    """Wall time that moves only when the loop sleeps; the test ends the loop after ``sleeps`` sleeps."""

    def __init__(self, *, sleeps: int) -> None:
        self.now = T0
        self.slept: list[float] = []
        self.left = sleeps

    def time(self) -> datetime.datetime:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if not self.left:
            raise Stop
        self.left -= 1
        self.slept.append(seconds)
        self.now += datetime.timedelta(seconds=seconds)


def valid(start: datetime.datetime, seconds: int, name: str) -> csr.CertifiedKey:
    return csr.CertifiedKey(cert=name, key="k", not_before=start, not_after=start + datetime.timedelta(seconds=seconds))


async def run_loop(
    clock: Clock, obtain: Callable[[], Any], *, current: csr.CertifiedKey, draw: float = 0.0
) -> list[str]:
    installed: list[str] = []
    with pytest.raises(Stop):
        await csr.keep_renewed(
            obtain,
            current=current,
            install=lambda pair: installed.append(pair.cert),
            now=clock.time,
            sleep=clock.sleep,
            draw=lambda: draw,
        )
    return installed


async def test_each_certificate_is_renewed_at_its_own_schedule_and_installed() -> None:
    clock = Clock(sleeps=3)
    made = iter(range(1, 10))

    async def obtain() -> csr.CertifiedKey:
        return valid(clock.now, 900, f"c{next(made)}")

    installed = await run_loop(clock, obtain, current=valid(T0, 900, "c0"))
    assert installed == ["c1", "c2", "c3"]
    assert clock.slept == [600, 600, 600]  # two thirds of each 900 s lifetime, counted from its own start


async def test_the_draw_brings_renewal_earlier_never_later() -> None:
    clock = Clock(sleeps=1)

    async def obtain() -> csr.CertifiedKey:
        return valid(clock.now, 900, "new")

    await run_loop(clock, obtain, current=valid(T0, 900, "old"), draw=1.0)
    assert clock.slept == [pytest.approx(900 * (2 / 3 - 0.1))]


async def test_a_failed_renewal_keeps_the_current_pair_and_retries_with_a_capped_backoff() -> None:
    # Ten failures (the signer's refusal or an unreachable API server), a renewal, one failure, a renewal.
    outcomes = [*([csr.SigningError("denied"), UnreachableError("down")] * 5), None, csr.SigningError("once"), None]
    clock = Clock(sleeps=len(outcomes))

    async def obtain() -> csr.CertifiedKey:
        failure = outcomes.pop(0)
        if failure:
            raise failure
        return valid(clock.now, 900, f"renewed at {clock.now:%H:%M:%S}")

    installed = await run_loop(clock, obtain, current=valid(T0, 900, "c0"))
    assert clock.slept == [600, 5, 10, 20, 40, 80, 160, 300, 300, 300, 300, 600, 5]
    assert installed == ["renewed at 00:35:15", "renewed at 00:45:20"]  # the backoff started afresh after a success


async def test_a_certificate_already_due_is_renewed_at_once() -> None:
    clock = Clock(sleeps=0)

    async def obtain() -> csr.CertifiedKey:
        return valid(clock.now, 900, "new")

    installed = await run_loop(clock, obtain, current=valid(T0 - datetime.timedelta(seconds=850), 900, "old"))
    assert installed == ["new"]


# -- the swap, on a live listener --------------------------------------------------------------------------


class Connection:
    """A TLS connection to an echo listener, made as the API server makes it: verifying the CA and the address."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int, ca: pki.KeyPair) -> Connection:
        client = ssl.create_default_context(cadata=ca.cert.decode())
        return cls(*await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="127.0.0.1"))

    def served(self) -> int:
        """The serial number of the certificate the listener presented."""
        der = self.writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return int(x509.load_der_x509_certificate(der).serial_number)

    async def echoes(self, line: bytes) -> bool:
        self.writer.write(line)
        return await self.reader.readline() == line


def serial(pair: csr.CertifiedKey) -> int:
    return int(x509.load_pem_x509_certificate(pair.cert.encode()).serial_number)


async def test_loading_a_new_pair_into_a_live_listeners_context_serves_it_to_new_connections() -> None:
    ca = pki.make_ca("cluster")
    first, second = pair_for(ca=ca), pair_for(ca=ca)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    first.load_into(context)

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while line := await reader.readline():
            writer.write(line)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=context)
    port = server.sockets[0].getsockname()[1]
    try:
        before = await Connection.open(port, ca)
        assert await before.echoes(b"ping\n")
        assert before.served() == serial(first)
        second.load_into(context)
        after = await Connection.open(port, ca)
        assert await after.echoes(b"ping\n")
        assert after.served() == serial(second)
        # A connection made before the swap goes on with the pair it was shown.
        assert await before.echoes(b"still\n")
        assert before.served() == serial(first)
        for connection in (before, after):
            connection.writer.close()
    finally:
        server.close()
        await server.wait_closed()
