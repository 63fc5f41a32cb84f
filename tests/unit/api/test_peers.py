"""Identity Secrets are read from where liqo writes them, and only as data (docs/security.md, "Identities")."""

from __future__ import annotations

import base64
import datetime
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.peers import PeerClients, UntrustedIdentity, describe, identity_access, identity_provider
from liqo.kube.pki import issue, make_ca
from liqo.peering.identities import identity_secret

PROVIDER = "5f0c6a3e-2b7d-4c1e-9a8b-0d1e2f3a4b5c"
NOW = datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(**user: Any) -> dict[str, Any]:
    ca = make_ca("ca")
    client = issue(ca, common_name=names.peer_user("consumer"), client=True)
    cluster = {"server": "https://127.0.0.1:6443", "certificate-authority-data": b64(ca.cert)}
    credentials = {"client-certificate-data": b64(client.cert), "client-key-data": b64(client.key)} | user
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "p", "cluster": cluster}],
        "users": [{"name": "u", "user": credentials}],
        "contexts": [{"name": "p", "context": {"cluster": "p", "user": "u", "namespace": "liqo-tenant-x"}}],
        "current-context": "p",
    }


def genuine(provider_id: str = PROVIDER, **user: Any) -> dict[str, Any]:
    """An identity Secret as liqo writes it, read back (resourceVersion set)."""
    secret = identity_secret(
        provider_id=provider_id,
        kubeconfig=kubeconfig(**user),
        issued_at=NOW,
        expires_at=NOW + datetime.timedelta(hours=2),
    )
    secret["metadata"]["resourceVersion"] = "1"
    return secret


def look_alike(namespace: str, name: str = names.IDENTITY_SECRET, provider_id: str = PROVIDER) -> dict[str, Any]:
    """A Secret a peer writes in a twin: liqo's labels, liqo's name, a working kubeconfig."""
    secret = genuine(provider_id)
    secret["metadata"] |= {"namespace": namespace, "name": name}
    return secret


def test_liqos_own_identity_is_read_from_its_place() -> None:
    provider_id, access = identity_access(genuine())
    assert provider_id == PROVIDER
    assert access.server == "https://127.0.0.1:6443"


@pytest.mark.parametrize(
    ("namespace", "name"),
    [
        ("shop-0a1b2c3d", names.IDENTITY_SECRET),  # a twin
        ("default", names.IDENTITY_SECRET),
        (names.tenant_namespace(PROVIDER), "liqo-identity-2"),
        (names.tenant_namespace("not-a-uuid"), names.IDENTITY_SECRET),
        (names.tenant_namespace(PROVIDER.upper()), names.IDENTITY_SECRET),
        (names.tenant_namespace(PROVIDER) + "-x", names.IDENTITY_SECRET),
    ],
)
def test_an_identity_anywhere_else_is_refused(namespace: str, name: str) -> None:
    with pytest.raises(UntrustedIdentity, match="only read from Secret liqo-identity in a provider's tenant namespace"):
        identity_access(look_alike(namespace, name))


def test_labels_naming_another_provider_than_the_namespace_are_refused() -> None:
    secret = genuine()
    secret["metadata"]["labels"][names.REMOTE_CLUSTER_ID] = str(uuid.uuid4())
    with pytest.raises(UntrustedIdentity, match="does not name the provider of its namespace"):
        identity_provider(secret)


@pytest.mark.parametrize(
    "user",
    [
        {"exec": {"command": "/bin/sh", "args": ["-c", "touch /tmp/pwned"]}},
        {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"},
        {"token": "abc"},
    ],
    ids=["exec", "tokenFile", "token"],
)
def test_a_kubeconfig_that_acts_is_refused_even_in_the_right_place(user: dict[str, Any]) -> None:
    with pytest.raises(UntrustedIdentity, match=f"may not carry {next(iter(user))}"):
        identity_access(genuine(**user))


@given(encoded=st.binary(max_size=64).map(b64) | st.text(max_size=64))
def test_whatever_the_kubeconfig_key_holds_is_an_identity_or_a_refusal(encoded: str) -> None:
    secret = genuine()
    secret["data"]["kubeconfig"] = encoded
    with pytest.raises(UntrustedIdentity):
        identity_access(secret)


def test_a_name_with_control_characters_is_logged_escaped() -> None:
    described = describe(look_alike("twin\x1b[2J", "liqo-identity\n"))
    assert "\x1b" not in described
    assert "\n" not in described
    assert described == "twin\\x1b[2J/liqo-identity\\n"


async def test_look_alikes_never_become_clients_nor_drop_the_real_one() -> None:
    changed: list[str] = []
    peers = PeerClients(on_change=changed.append)
    peers.update(genuine())
    real = peers.get(PROVIDER)
    assert real is not None
    assert changed == [PROVIDER]
    other = str(uuid.uuid4())
    for secret in (
        look_alike("shop-0a1b2c3d"),  # would replace the real provider's client
        look_alike("shop-0a1b2c3d", provider_id=other),  # would add a provider
        genuine(other, exec={"command": "/bin/true"}),  # in place, but acting
    ):
        secret["metadata"]["resourceVersion"] = "2"
        peers.update(secret)
        peers.remove(secret)
    assert peers.get(PROVIDER) is real
    assert peers.providers() == [PROVIDER]
    assert changed == [PROVIDER]
    await peers.close()


async def test_a_renewed_identity_replaces_the_client_and_a_deleted_one_drops_it() -> None:
    peers = PeerClients()
    peers.update(genuine())
    first = peers.get(PROVIDER)
    renewed = genuine()
    renewed["metadata"]["resourceVersion"] = "2"
    peers.update(renewed)
    assert peers.get(PROVIDER) is not first
    peers.remove(renewed)
    assert peers.get(PROVIDER) is None
    await peers.close()


def test_what_the_secret_holds_never_reaches_a_log_line() -> None:
    secret = genuine()
    assert orjson.dumps(secret["data"]).decode() not in describe(secret)
