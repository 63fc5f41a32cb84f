"""Certificates and kubeconfigs, made with ``cryptography`` (no openssl binary needed).

Used by local clusters (their whole PKI), by the manager (a self-signed endpoint certificate when none
is given) and by :mod:`liqo.kube.csr` (the subject and names of the requests the cluster signs). On a
local cluster one CA signs everything: it is the API server's client CA, the CSR signer of
kube-controller-manager (so ``certificates.k8s.io`` issues certificates the API server trusts) and the CA
of etcd and the kwok "kubelet". Each component gets its own client identity with the user name and groups
RBAC expects (``system:kube-controller-manager``, ``system:kube-scheduler``...), not one shared admin
certificate, so the local clusters exercise the same authorisation paths as real ones. Keys are ECDSA P-256.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_VALIDITY = datetime.timedelta(days=365)
LEAF_VALIDITY = datetime.timedelta(days=90)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert: bytes
    key: bytes


def new_key() -> ec.EllipticCurvePrivateKey:
    """A fresh ECDSA P-256 key."""
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The unencrypted PKCS#8 PEM of a private key."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The SubjectPublicKeyInfo PEM of a key's public half."""
    return key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def subject(*, common_name: str, organizations: Sequence[str] = ()) -> x509.Name:
    """``O=<each organization>, CN=<common_name>``: what the API server reads as groups and user name."""
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def alternative_names(*, dns_names: Sequence[str] = (), ip_addresses: Sequence[str] = ()) -> list[x509.GeneralName]:
    """Subject alternative names for ``dns_names`` and ``ip_addresses``.

    Raises:
        ValueError: an address is not an IP address.
    """
    sans: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    return sans + [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]


def make_ca(common_name: str, *, now: datetime.datetime | None = None) -> KeyPair:
    """A self-signed CA certificate."""
    now = now or datetime.datetime.now(datetime.UTC)
    key = new_key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + CA_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


def issue(
    ca: KeyPair,
    *,
    common_name: str,
    organizations: Sequence[str] = (),
    dns_names: Sequence[str] = (),
    ip_addresses: Sequence[str] = (),
    server: bool = False,
    client: bool = False,
    validity: datetime.timedelta = LEAF_VALIDITY,
    now: datetime.datetime | None = None,
) -> KeyPair:
    """A leaf certificate signed by ``ca`` for server and/or client authentication."""
    now = now or datetime.datetime.now(datetime.UTC)
    ca_cert = x509.load_pem_x509_certificate(ca.cert)
    ca_key = serialization.load_pem_private_key(ca.key, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the CA key must be an ECDSA key")
    key = new_key()
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject(common_name=common_name, organizations=organizations))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(min(now + validity, ca_cert.not_valid_after_utc))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    sans = alternative_names(dns_names=dns_names, ip_addresses=ip_addresses)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), key_pem(key))


def write_private(path: Path, data: bytes) -> None:
    """Write a secret file readable by its owner only, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def kubeconfig(
    *, cluster: str, server: str, ca: bytes, user: str, cert: bytes, key: bytes, tls_server_name: str = ""
) -> dict[str, Any]:
    """A kubeconfig with embedded client-certificate credentials, as a dict ready for YAML/JSON.

    ``tls_server_name``: the name to verify the server's certificate against, when ``server``'s address is
    not among its SANs (a loopback API server reached through a NAT).
    """

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {"server": server, "certificate-authority-data": b64(ca)}
                | ({"tls-server-name": tls_server_name} if tls_server_name else {}),
            }
        ],
        "users": [{"name": user, "user": {"client-certificate-data": b64(cert), "client-key-data": b64(key)}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user}}],
        "current-context": cluster,
    }
