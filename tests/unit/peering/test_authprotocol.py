"""The pure half of authentication: key and token signatures, nonces, message fields and the CSR checks."""

from __future__ import annotations

import base64
import datetime
import re
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.networks import ClusterNetwork
from liqo.peering.authprotocol import (
    ENROLMENT_KEY,
    KEY_SIGNATURE,
    SIGNATURE,
    TOKEN_SIGNATURE,
    IdentityRequest,
    IdentityResponse,
    InvalidMessage,
    NonceStore,
    UnprovenToken,
    canonical,
    check_csr,
    enrolment_fingerprint,
    make_csr,
    parse_json,
    sign_answer,
    sign_request,
    verify_answer,
    verify_request,
)
from liqo.peering.tokens import enrolment_key

TOKEN = "c2VjcmV0LXRva2VuLW9mLTMyLWJ5dGVzLWxvbmctLS0"
PEER = "5a3c1b2e-0d4f-4a6b-9c8d-7e6f5a4b3c2d"
KEY = ClusterKey.generate()
OTHER_KEY = ClusterKey.generate()
NETWORK = ClusterNetwork.parse(pod_cidr="10.244.0.0/16", service_cidr="10.96.0.0/16")


def request_message(**overrides: Any) -> dict[str, Any]:
    message = {
        "clusterID": PEER,
        "clusterName": "consumer",
        "authURL": "https://consumer.example:8443",
        "nonce": "n0nce",
        "csr": make_csr(PEER)[1],
        "publicKey": KEY.public_pem,
        "network": NETWORK.to_message(),
    }
    return message | overrides


# -- signatures ------------------------------------------------------------------------------------------


def proves(token: str, message: dict[str, Any]) -> bool:
    """Whether ``message`` proves ``token``: signed by the key the token is the seed of, which it presents."""
    try:
        return enrolment_fingerprint(message) == enrolment_key(token).fingerprint
    except UnprovenToken:
        return False


def test_a_request_signed_with_its_key_and_the_token_verifies_both_ways() -> None:
    signed = sign_request(request_message(), key=KEY, token=TOKEN)
    assert verify_request(signed, public_key=KEY.public_pem)
    assert proves(TOKEN, signed)
    assert not verify_request(signed, public_key=OTHER_KEY.public_pem)
    assert not proves(TOKEN + "x", signed)
    assert TOKEN not in str(signed)  # the token never crosses the wire: its public key and a signature do


def test_a_request_without_a_token_carries_no_token_signature() -> None:
    signed = sign_request(request_message(), key=KEY, token=None)
    assert TOKEN_SIGNATURE not in signed
    assert ENROLMENT_KEY not in signed
    assert verify_request(signed, public_key=KEY.public_pem)
    with pytest.raises(UnprovenToken, match="enrolling needs a token"):
        enrolment_fingerprint(signed)


def test_a_token_signature_under_another_tokens_key_is_unproven() -> None:
    """Presenting the public key of a token one does not hold, with a signature by one's own: refused."""
    signed = sign_request(request_message(), key=KEY, token=TOKEN)
    swapped = signed | {ENROLMENT_KEY: enrolment_key("the-token-of-someone-else").public_pem}
    with pytest.raises(UnprovenToken, match="bad token signature"):
        enrolment_fingerprint(swapped)


def test_a_token_is_the_seed_of_one_key_whatever_the_string() -> None:
    assert enrolment_key(TOKEN).fingerprint == enrolment_key(TOKEN).fingerprint
    assert enrolment_key(TOKEN).fingerprint != enrolment_key(TOKEN + "x").fingerprint
    assert enrolment_key("é \x00 not base64").fingerprint.startswith("sha256:")


def test_canonical_json_is_compact_sorted_and_leaves_every_signature_out() -> None:
    message = {"b": 1, "a": {"d": [1, 2], "c": "x"}, SIGNATURE: "s", KEY_SIGNATURE: "k", TOKEN_SIGNATURE: "t"}
    assert canonical(message) == b'{"a":{"c":"x","d":[1,2]},"b":1}'
    assert canonical(message, nonce="n") == b'{"a":{"c":"x","d":[1,2]},"b":1}n'


@pytest.mark.parametrize("field", ["clusterID", "clusterName", "authURL", "nonce", "csr", "publicKey", ENROLMENT_KEY])
def test_changing_or_removing_any_field_breaks_both_signatures(field: str) -> None:
    signed = sign_request(request_message(), key=KEY, token=TOKEN)
    for altered in (signed | {field: signed[field] + "x"}, {k: v for k, v in signed.items() if k != field}):
        assert not verify_request(altered, public_key=KEY.public_pem)
        assert not proves(TOKEN, altered)


def test_adding_a_field_breaks_both_signatures() -> None:
    signed = sign_request(request_message(), key=KEY, token=TOKEN) | {"extra": "x"}
    assert not verify_request(signed, public_key=KEY.public_pem)
    assert not proves(TOKEN, signed)


@pytest.mark.parametrize("signature", [None, 42, ["x"], "", "not base64 at all", "é", "A" * 200])
def test_malformed_signatures_never_verify(signature: object) -> None:
    message = request_message() | {KEY_SIGNATURE: signature, TOKEN_SIGNATURE: signature}
    assert not verify_request(message, public_key=KEY.public_pem)
    assert not proves(TOKEN, message | {ENROLMENT_KEY: enrolment_key(TOKEN).public_pem})


@pytest.mark.parametrize("public_key", [None, 42, "", "not a key", OTHER_KEY.public_pem + "x", "A" * 5000])
def test_a_malformed_enrolment_key_never_verifies(public_key: object) -> None:
    signed = sign_request(request_message(), key=KEY, token=TOKEN) | {ENROLMENT_KEY: public_key}
    with pytest.raises(UnprovenToken, match="bad token signature"):
        enrolment_fingerprint(signed)


def test_an_empty_token_signs_nothing() -> None:
    signed = sign_request(request_message(), key=KEY, token="")
    assert TOKEN_SIGNATURE not in signed


def test_an_answer_is_bound_to_its_key_and_to_the_nonce_of_its_request() -> None:
    answer = sign_answer({"clusterID": "provider", "certificate": "pem"}, key=KEY, nonce="nonce-1")
    assert verify_answer(answer, public_key=KEY.public_pem, nonce="nonce-1")
    assert not verify_answer(answer, public_key=KEY.public_pem, nonce="nonce-2")
    assert not verify_answer(answer, public_key=OTHER_KEY.public_pem, nonce="nonce-1")
    assert not verify_answer(answer | {"certificate": "other"}, public_key=KEY.public_pem, nonce="nonce-1")


def test_a_token_signature_is_no_answer_signature() -> None:
    # A token holder can sign anything with the token's key; an answer must carry the provider's key signature.
    answer = {"clusterID": "provider", "certificate": "pem"}
    forged = answer | {SIGNATURE: enrolment_key(TOKEN).sign(canonical(answer))}
    assert not verify_answer(forged, public_key=KEY.public_pem, nonce="")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=10,
)
messages = st.dictionaries(
    st.text(max_size=8).filter(lambda k: k not in (SIGNATURE, KEY_SIGNATURE, TOKEN_SIGNATURE, ENROLMENT_KEY)),
    json_values,
    min_size=1,
    max_size=6,
)


@given(message=messages, data=st.data())
def test_any_change_to_any_field_is_detected(message: dict[str, Any], data: st.DataObject) -> None:
    signed = sign_request(message, key=KEY, token=TOKEN)
    key = data.draw(st.sampled_from(sorted(message)))
    replacement = data.draw(json_values.filter(lambda v: v != message[key] or type(v) is not type(message[key])))
    assert not verify_request(signed | {key: replacement}, public_key=KEY.public_pem)
    assert not proves(TOKEN, signed | {key: replacement})


@given(message=messages, nonce=st.text(max_size=10))
def test_key_order_and_a_decode_round_trip_do_not_change_the_signatures(message: dict[str, Any], nonce: str) -> None:
    signed = sign_answer(message, key=KEY, nonce=nonce)
    reordered = dict(reversed(list(signed.items())))
    assert verify_answer(reordered, public_key=KEY.public_pem, nonce=nonce)
    assert verify_answer(
        parse_json(canonical(message)) | {SIGNATURE: signed[SIGNATURE]}, public_key=KEY.public_pem, nonce=nonce
    )


# -- nonces ----------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_nonce_is_good_once() -> None:
    store = NonceStore()
    nonce = store.issue()
    assert store.consume(nonce)
    assert not store.consume(nonce)
    assert not store.consume("never-issued")


def test_nonces_expire_after_their_ttl() -> None:
    clock = Clock()
    store = NonceStore(ttl=60, clock=clock)
    early, late = store.issue(), store.issue()
    clock.now += 59.9
    assert store.consume(early)
    clock.now += 0.1
    assert not store.consume(late)
    assert len(store) == 0


def test_the_store_is_bounded_and_forgets_the_oldest_first() -> None:
    store = NonceStore(max_size=3)
    issued = [store.issue() for _ in range(5)]
    assert len(store) == 3
    assert not store.consume(issued[0])
    assert not store.consume(issued[1])
    assert all(store.consume(nonce) for nonce in issued[2:])


def test_expired_nonces_do_not_accumulate() -> None:
    clock = Clock()
    store = NonceStore(ttl=60, clock=clock)
    for _ in range(100):
        store.issue()
        clock.now += 1
    assert len(store) <= 61


def test_nonces_are_unguessable() -> None:
    store = NonceStore()
    nonces = {store.issue() for _ in range(100)}
    assert len(nonces) == 100
    assert all(len(n) >= 40 for n in nonces)


# -- messages --------------------------------------------------------------------------------------------


def test_a_request_round_trips_through_its_message() -> None:
    request = IdentityRequest(
        cluster_id=PEER,
        cluster_name="c",
        auth_url=None,
        nonce="n",
        csr="pem",
        public_key=KEY.public_pem,
        network=NETWORK,
    )
    assert "authURL" not in request.to_message()
    assert IdentityRequest.from_message(request.to_message()) == request
    assert request.key_fingerprint == KEY.fingerprint


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ({"clusterID": None}, "'clusterID' must be a non-empty string"),
        ({"clusterName": ""}, "'clusterName' must be a non-empty string"),
        ({"nonce": 7}, "'nonce' must be a non-empty string"),
        ({"csr": ["pem"]}, "'csr' must be a non-empty string"),
        ({"clusterID": "Upper-Case"}, "'clusterID' must be a cluster ID"),
        ({"clusterID": "../etc"}, "'clusterID' must be a cluster ID"),
        ({"clusterID": "rome"}, "'clusterID' must be a cluster ID"),
        ({"clusterID": PEER.upper()}, "'clusterID' must be a cluster ID"),
        ({"publicKey": None}, "'publicKey' must be an Ed25519 public key in PEM"),
        ({"publicKey": "not a key"}, "'publicKey' is not a PEM public key"),
        ({"publicKey": "x" * 5000}, "'publicKey' must be an Ed25519 public key in PEM"),
        ({"authURL": "file:///etc/passwd"}, "'authURL' must be an https:// URL"),
        ({"authURL": "http://consumer.example"}, "'authURL' must be an https:// URL"),
        ({"clusterName": "n" * 254}, "'clusterName' is longer than 253"),
        ({"clusterName": "evil\n2026-01-01 INFO forged"}, "'clusterName' must be printable text: it holds U+000A"),
        ({"clusterName": "\x1b[2J"}, "'clusterName' must be printable text: it holds U+001B, a control character"),
        ({"authURL": "https://consumer.example\r\n"}, "'authURL' must be printable text: it holds U+000D"),
        ({"nonce": "n\u202e"}, "'nonce' must be printable text: it holds U+202E, a format character"),
        ({"network": None}, "'network' must be an object with 'podCIDR' and 'serviceCIDR'"),
        ({"network": "10.244.0.0/16"}, "'network' must be an object"),
        ({"network": {"podCIDR": "10.244.0.0/16"}}, "'network.serviceCIDR' must be a CIDR"),
        ({"network": {"podCIDR": "10.244.0.0/16", "serviceCIDR": "10.96.0.1/16"}}, "write 10.96.0.0/16"),
        ({"network": {"podCIDR": "169.254.0.0/16", "serviceCIDR": "10.96.0.0/16"}}, "special-purpose range"),
        ({"network": {"podCIDR": "10.0.0.0/8", "serviceCIDR": "10.96.0.0/16"}}, "overlap"),
    ],
)
def test_bad_request_fields_are_named(overrides: dict[str, Any], complaint: str) -> None:
    message = {k: v for k, v in (request_message() | overrides).items() if v is not None}
    with pytest.raises(InvalidMessage, match=re.escape(complaint)):
        IdentityRequest.from_message(message)


def test_an_rsa_or_ecdsa_cluster_key_is_refused() -> None:
    ecdsa = ec.generate_private_key(ec.SECP256R1()).public_key()
    pem = ecdsa.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()
    with pytest.raises(InvalidMessage, match="must be an Ed25519 key"):
        IdentityRequest.from_message(request_message(publicKey=pem))


def test_a_cluster_id_makes_a_valid_namespace_name() -> None:
    assert IdentityRequest.from_message(request_message()).cluster_id == PEER
    assert len(names.tenant_namespace(PEER)) <= 63


def test_a_response_round_trips_and_carries_its_expiry_in_rfc3339() -> None:
    expires = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    response = IdentityResponse(
        cluster_id="p",
        cluster_name="provider",
        api_server_url="https://127.0.0.1:6443",
        ca="",
        certificate="pem",
        namespace="liqo-tenant-x",
        expires_at=expires,
        public_key=KEY.public_pem,
        network=NETWORK,
    )
    message = response.to_message()
    assert message["expiresAt"] == "2030-01-02T03:04:05Z"
    assert IdentityResponse.from_message(message) == response
    with pytest.raises(InvalidMessage, match="'ca' must be a string"):
        IdentityResponse.from_message({k: v for k, v in message.items() if k != "ca"})
    with pytest.raises(InvalidMessage, match="not an RFC 3339 time"):
        IdentityResponse.from_message(message | {"expiresAt": "tomorrow"})
    with pytest.raises(InvalidMessage, match="'network' must be an object"):
        IdentityResponse.from_message({k: v for k, v in message.items() if k != "network"})
    with pytest.raises(InvalidMessage, match=r"'network\.podCIDR': 127\.0\.0\.0/8 overlaps the special-purpose"):
        IdentityResponse.from_message(message | {"network": {"podCIDR": "127.0.0.0/8", "serviceCIDR": "10.96.0.0/16"}})

    for field in ("clusterName", "namespace", "apiServerURL"):  # a provider's names reach the consumer's logs
        with pytest.raises(InvalidMessage, match=f"'{field}' must be printable text: it holds U\\+001B"):
            IdentityResponse.from_message(message | {field: message[field] + "\x1b[2J"})
    with pytest.raises(InvalidMessage, match=r"'expiresAt': .* has no time zone"):
        IdentityResponse.from_message(message | {"expiresAt": "2030-01-02T03:04:05"})
    assert IdentityResponse.from_message(message | {"expiresAt": "2030-01-02T04:04:05+01:00"}) == response


@pytest.mark.parametrize("body", [b"", b"{", b"[1, 2]", b'"text"', b"\xff"])
def test_bodies_must_be_json_objects(body: bytes) -> None:
    with pytest.raises(InvalidMessage):
        parse_json(body)


# -- CSRs ------------------------------------------------------------------------------------------------


SHA256 = hashes.SHA256()


def csr_pem(attributes: list[tuple[x509.ObjectIdentifier, str]], key: Any = None, *, algorithm: Any = SHA256) -> str:
    key = key or ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(oid, value) for oid, value in attributes])
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, algorithm)
    return csr.public_bytes(serialization.Encoding.PEM).decode()


def test_the_consumer_csr_passes_the_provider_checks() -> None:
    key_pem, pem = make_csr(PEER)
    csr = check_csr(pem, cluster_id=PEER)
    assert csr.subject.rfc4514_string() == f"CN={names.peer_user(PEER)}"
    key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    assert isinstance(key.curve, ec.SECP256R1)
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    assert csr.public_key().public_bytes(serialization.Encoding.PEM, public) == key.public_key().public_bytes(
        serialization.Encoding.PEM, public
    )


def test_every_csr_has_a_new_key() -> None:
    assert make_csr(PEER)[0] != make_csr(PEER)[0]


def test_a_csr_asking_for_system_masters_is_refused() -> None:
    pem = csr_pem([(NameOID.ORGANIZATION_NAME, "system:masters"), (NameOID.COMMON_NAME, names.peer_user(PEER))])
    with pytest.raises(InvalidMessage, match="no organisation"):
        check_csr(pem, cluster_id=PEER)


@pytest.mark.parametrize(
    "attributes",
    [
        [(NameOID.COMMON_NAME, names.peer_user("another-peer"))],
        [(NameOID.COMMON_NAME, "system:admin")],
        [(NameOID.COMMON_NAME, names.peer_user(PEER)), (NameOID.COMMON_NAME, "admin")],
        [(NameOID.COMMON_NAME, names.peer_user(PEER)), (NameOID.ORGANIZATIONAL_UNIT_NAME, "x")],
        [],
    ],
)
def test_a_csr_whose_subject_is_not_exactly_its_own_user_is_refused(
    attributes: list[tuple[x509.ObjectIdentifier, str]],
) -> None:
    with pytest.raises(InvalidMessage, match="subject must be exactly"):
        check_csr(csr_pem(attributes), cluster_id=PEER)


def test_a_multi_valued_rdn_is_refused() -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    rdn = x509.RelativeDistinguishedName(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, names.peer_user(PEER)),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
        ]
    )
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name([rdn])).sign(key, hashes.SHA256())
    with pytest.raises(InvalidMessage, match="subject must be exactly"):
        check_csr(csr.public_bytes(serialization.Encoding.PEM).decode(), cluster_id=PEER)


@pytest.mark.parametrize(
    "garbage", ["", "not a csr", "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n"]
)
def test_garbage_is_not_a_csr(garbage: str) -> None:
    with pytest.raises(InvalidMessage, match="not a PEM certificate signing request"):
        check_csr(garbage, cluster_id=PEER)


def test_a_csr_with_a_broken_signature_is_refused() -> None:
    pem = make_csr(PEER)[1]
    der = bytearray(x509.load_pem_x509_csr(pem.encode()).public_bytes(serialization.Encoding.DER))
    der[-1] ^= 0x01  # the last byte belongs to the signature's last integer
    body = base64.encodebytes(bytes(der)).decode()
    broken = f"-----BEGIN CERTIFICATE REQUEST-----\n{body}-----END CERTIFICATE REQUEST-----\n"
    with pytest.raises(InvalidMessage, match="signature is not valid"):
        check_csr(broken, cluster_id=PEER)


@pytest.mark.parametrize(
    ("key", "complaint"),
    [
        (rsa.generate_private_key(public_exponent=65537, key_size=1024), "at least 2048 bits"),
        (ec.generate_private_key(ec.SECP384R1()), "curve P-256"),
        (ed25519.Ed25519PrivateKey.generate(), "ECDSA P-256 or RSA"),
    ],
)
def test_weak_or_unexpected_keys_are_refused(key: Any, complaint: str) -> None:
    algorithm = None if isinstance(key, ed25519.Ed25519PrivateKey) else SHA256
    pem = csr_pem([(NameOID.COMMON_NAME, names.peer_user(PEER))], key, algorithm=algorithm)
    with pytest.raises(InvalidMessage, match=complaint):
        check_csr(pem, cluster_id=PEER)


def test_rsa_2048_is_accepted() -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    check_csr(csr_pem([(NameOID.COMMON_NAME, names.peer_user(PEER))], key), cluster_id=PEER)
