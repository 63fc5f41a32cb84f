"""A cluster's key: what makes a cluster ID stand for one cluster and no other.

A cluster ID is a claim anyone can make in a request; a signature is not. Every cluster makes an Ed25519
key pair when liqo is installed (Secret ``liqo/liqo-cluster-key``, kept across re-installs like the ID),
publishes the public half in its identity ConfigMap, and signs with the private half: a consumer its
identity requests, a provider its answers. A peer remembers the key by its fingerprint
(ForeignCluster ``spec.keyFingerprint``) and refuses any other key speaking for that cluster ID: a consumer
therefore cannot be impersonated by another holder of an enrolment token, and a provider cannot be
impersonated by anyone, token or not (docs/security.md, "Peer authentication").

Ed25519 only: one algorithm means no downgrade to negotiate and no weak parameter to refuse; signatures
are deterministic and 64 bytes. The fingerprint is the SHA-256 of the public key's SubjectPublicKeyInfo
(DER), written ``sha256:<hex>`` so that people can compare it by eye, as SSH users do.

Pure, no I/O; reading the Secret is :func:`liqo.api.identity.read_cluster_key`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

FINGERPRINT_PREFIX = "sha256:"
_MAX_PEM = 1024
"""An Ed25519 public key in PEM is 113 bytes: anything much longer is not one."""


class InvalidKey(ValueError):
    """A public key (or a private one) that is not an Ed25519 key in PEM."""


def _spki(key: ed25519.Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_public_key(pem: object) -> ed25519.Ed25519PublicKey:
    """The Ed25519 public key in ``pem`` (whatever a peer sent: only a PEM string of that kind passes)."""
    if not isinstance(pem, str) or not pem or len(pem) > _MAX_PEM:
        raise InvalidKey("'publicKey' must be an Ed25519 public key in PEM")
    try:
        key = serialization.load_pem_public_key(pem.encode())
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise InvalidKey("'publicKey' is not a PEM public key") from exc
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise InvalidKey("'publicKey' must be an Ed25519 key")
    return key


def fingerprint(public_pem: str) -> str:
    """``sha256:<hex>`` of the public key in ``public_pem``.

    Raises:
        InvalidKey: it is not an Ed25519 public key in PEM.
    """
    return FINGERPRINT_PREFIX + hashlib.sha256(_spki(load_public_key(public_pem))).hexdigest()


def verify(public_pem: str, data: bytes, signature: object) -> bool:
    """Whether ``signature`` (base64) is the signature of ``data`` by the key in ``public_pem``.

    False, never an exception, for anything a peer may send instead: a non-string, bad base64, a wrong
    length, another key. ``public_pem`` must have passed :func:`fingerprint` or :func:`load_public_key`.
    """
    if not isinstance(signature, str) or len(signature) > 128:
        return False
    try:
        raw = base64.b64decode(signature, validate=True)
        load_public_key(public_pem).verify(raw, data)
    except (binascii.Error, ValueError, InvalidSignature, InvalidKey):
        return False
    return True


@dataclass(frozen=True)
class ClusterKey:
    """This cluster's key pair (the private half stays in this process and in its Secret)."""

    private: ed25519.Ed25519PrivateKey = field(repr=False)

    @classmethod
    def generate(cls) -> ClusterKey:
        """A fresh key pair."""
        return cls(ed25519.Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, pem: str) -> ClusterKey:
        """The key pair of a PKCS#8 PEM private key.

        Raises:
            InvalidKey: it is not an Ed25519 private key.
        """
        try:
            key = serialization.load_pem_private_key(pem.encode(), password=None)
        except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
            raise InvalidKey("the cluster key is not a PEM private key") from exc
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise InvalidKey("the cluster key must be an Ed25519 key")
        return cls(key)

    def private_pem(self) -> str:
        """The private key, PKCS#8 PEM (for the Secret only)."""
        return self.private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()

    @property
    def public_pem(self) -> str:
        """The public key, PEM (SubjectPublicKeyInfo): what peers are sent."""
        return (
            self.private.public_key()
            .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
            .decode()
        )

    @property
    def fingerprint(self) -> str:
        """``sha256:<hex>`` of the public key: what peers pin."""
        return FINGERPRINT_PREFIX + hashlib.sha256(_spki(self.private.public_key())).hexdigest()

    def sign(self, data: bytes) -> str:
        """The signature of ``data``, base64."""
        return base64.b64encode(self.private.sign(data)).decode()
