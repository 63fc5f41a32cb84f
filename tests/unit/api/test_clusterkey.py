"""Cluster keys: fingerprints people can compare, signatures that never raise on what a peer sends."""

from __future__ import annotations

import re

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import clusterkey
from liqo.api.clusterkey import ClusterKey, InvalidKey

KEY = ClusterKey.generate()


def test_a_key_survives_its_secret_and_keeps_its_fingerprint() -> None:
    again = ClusterKey.from_pem(KEY.private_pem())
    assert again.public_pem == KEY.public_pem
    assert again.fingerprint == KEY.fingerprint == clusterkey.fingerprint(KEY.public_pem)
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", KEY.fingerprint)


def test_two_keys_have_two_fingerprints() -> None:
    assert ClusterKey.generate().fingerprint != KEY.fingerprint


def test_a_signature_verifies_with_its_key_only() -> None:
    signature = KEY.sign(b"data")
    assert clusterkey.verify(KEY.public_pem, b"data", signature)
    assert not clusterkey.verify(KEY.public_pem, b"other", signature)
    assert not clusterkey.verify(ClusterKey.generate().public_pem, b"data", signature)


@given(signature=st.one_of(st.none(), st.integers(), st.text(max_size=200), st.lists(st.text(), max_size=2)))
def test_whatever_a_peer_sends_as_a_signature_is_false_not_an_error(signature: object) -> None:
    assert not clusterkey.verify(KEY.public_pem, b"data", signature)


@pytest.mark.parametrize(
    "pem", [None, "", "garbage", 42, "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"]
)
def test_what_is_not_an_ed25519_public_key_is_refused(pem: object) -> None:
    with pytest.raises(InvalidKey):
        clusterkey.load_public_key(pem)


def test_other_algorithms_are_refused_for_both_halves() -> None:
    private = ec.generate_private_key(ec.SECP256R1())
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    private_pem = private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    with pytest.raises(InvalidKey, match="Ed25519"):
        clusterkey.fingerprint(public_pem.decode())
    with pytest.raises(InvalidKey, match="Ed25519"):
        ClusterKey.from_pem(private_pem.decode())


def test_the_private_half_never_shows_in_a_repr() -> None:
    assert "PRIVATE" not in repr(KEY)
