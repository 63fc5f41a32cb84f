import base64
import os
import ssl
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.kubeconfig import (
    Access,
    Authenticator,
    KubeconfigError,
    in_cluster,
    load_dict,
    load_file,
    load_sealed,
    ssl_context,
)
from liqo.kube.pki import issue, make_ca


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def config(user: dict[str, Any], cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "current-context": "ctx",
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443/"}}],
        "users": [{"name": "u", "user": user}],
    }


def test_embedded_certificates_load_into_a_tls_context() -> None:
    ca = make_ca("ca")
    client = issue(ca, common_name="me", client=True)
    access = load_dict(
        config(
            {"client-certificate-data": b64(client.cert), "client-key-data": b64(client.key)},
            {"server": "https://127.0.0.1:6443/", "certificate-authority-data": b64(ca.cert)},
        )
    )
    assert access.server == "https://127.0.0.1:6443"
    assert access.ca_pem == ca.cert.decode()
    context = ssl_context(access)
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED
    # The key never shows (nor the client certificate, nor a token); the CA's base64 may spell "key" by chance.
    shown = repr(access)
    assert "PRIVATE KEY" not in shown
    assert client.key.decode().splitlines()[1] not in shown
    assert client.cert.decode().splitlines()[1] not in shown


def test_file_paths_resolve_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    ca = make_ca("ca")
    (tmp_path / "ca.crt").write_bytes(ca.cert)
    (tmp_path / "token").write_text("file-token\n")
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(config({"tokenFile": "token"}, {"server": "https://h:1", "certificate-authority": "ca.crt"}))
    )
    access = load_file(path)
    assert access.ca_pem == ca.cert.decode()
    assert access.token_file == str(tmp_path / "token")


async def test_token_file_and_static_token_become_bearer_headers(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("rotating\n")
    assert await Authenticator(Access(server="https://h", token_file=str(token))).header() == "Bearer rotating"
    assert await Authenticator(Access(server="https://h", token="static")).header() == "Bearer static"
    assert await Authenticator(Access(server="https://h")).header() is None


async def test_exec_plugin_token_is_cached_until_expiry(tmp_path: Path) -> None:
    counter = tmp_path / "calls"
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(
        "#!/bin/sh\n"
        f"echo x >> {counter}\n"
        'echo "{\\"apiVersion\\":\\"client.authentication.k8s.io/v1\\",\\"kind\\":\\"ExecCredential\\",'
        '\\"status\\":{\\"token\\":\\"$MY_TOKEN\\",\\"expirationTimestamp\\":\\"2999-01-01T00:00:00Z\\"}}"\n'
    )
    plugin.chmod(plugin.stat().st_mode | stat.S_IEXEC)
    access = load_dict(config({"exec": {"command": str(plugin), "env": [{"name": "MY_TOKEN", "value": "t0k"}]}}))
    auth = Authenticator(access)
    assert await auth.header() == "Bearer t0k"
    assert await auth.header() == "Bearer t0k"
    assert counter.read_text().count("x") == 1
    auth.invalidate()
    assert await auth.header() == "Bearer t0k"
    assert counter.read_text().count("x") == 2


async def test_failing_exec_plugin_is_a_clear_error(tmp_path: Path) -> None:
    access = load_dict(config({"exec": {"command": "false"}}))
    with pytest.raises(KubeconfigError, match="exec credential plugin 'false' failed"):
        await Authenticator(access).header()


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "must be a mapping"),
        ({"contexts": []}, "no current-context"),
        (config({}) | {"current-context": "other"}, "no context named 'other'"),
        (config({}, {"insecure-skip-tls-verify": True}), "has no server"),
        (config({"client-key-data": "%%%"}), "not valid base64"),
    ],
)
def test_malformed_kubeconfigs_are_refused_with_the_reason(document: Any, message: str) -> None:
    with pytest.raises(KubeconfigError, match=message):
        load_dict(document)


def test_missing_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="cannot read kubeconfig"):
        load_file(tmp_path / "absent")


def test_no_secret_reaches_the_disk(tmp_path: Path) -> None:
    ca = make_ca("ca")
    client = issue(ca, common_name="me", client=True)
    before = set(os.listdir("/tmp"))
    ssl_context(Access(server="https://h", ca_pem=ca.cert.decode(), cert_pem=client.cert.decode(),
                       key_pem=client.key.decode()))  # fmt: skip
    assert set(os.listdir("/tmp")) - before == set()


def test_in_cluster_outside_a_pod_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError, match="pass --kubeconfig"):
        in_cluster()


# -- sealed kubeconfigs: data only ------------------------------------------------------------------


def sealed_config() -> dict[str, Any]:
    ca = make_ca("ca")
    client = issue(ca, common_name="me", client=True)
    return config(
        {"client-certificate-data": b64(client.cert), "client-key-data": b64(client.key)},
        {"server": "https://127.0.0.1:6443/", "certificate-authority-data": b64(ca.cert)},
    )


def test_a_sealed_kubeconfig_of_embedded_data_loads() -> None:
    access = load_sealed(sealed_config())
    assert access.server == "https://127.0.0.1:6443"
    assert access.cert_pem
    assert access.key_pem
    assert access.ca_pem
    assert (access.token, access.token_file, access.exec_plugin, access.insecure) == (None, None, None, False)


ACTING_FIELDS = [
    ("user", {"exec": {"command": "/bin/sh", "args": ["-c", "id"]}}, "exec"),
    ("user", {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}, "tokenFile"),
    ("user", {"token": "t"}, "token"),
    ("user", {"client-certificate": "/etc/kubernetes/pki/admin.crt"}, "client-certificate"),
    ("user", {"client-key": "/etc/kubernetes/pki/admin.key"}, "client-key"),
    ("user", {"auth-provider": {"name": "oidc"}}, "auth-provider"),
    ("user", {"username": "admin", "password": "p"}, "password, username"),
    ("user", {"as": "system:admin"}, "as"),
    ("cluster", {"certificate-authority": "/etc/ssl/ca.crt"}, "certificate-authority"),
    ("cluster", {"insecure-skip-tls-verify": True}, "insecure-skip-tls-verify"),
    ("cluster", {"proxy-url": "http://attacker:3128"}, "proxy-url"),
    ("cluster", {"tls-server-name": "kubernetes"}, "tls-server-name"),
    ("context", {"extensions": []}, "extensions"),
]


@pytest.mark.parametrize(("section", "extra", "named"), ACTING_FIELDS, ids=[f[2] for f in ACTING_FIELDS])
def test_anything_that_acts_is_refused_naming_the_field(section: str, extra: dict[str, Any], named: str) -> None:
    document = sealed_config()
    plural = {"user": "users", "cluster": "clusters", "context": "contexts"}[section]
    document[plural][0][section] |= extra
    with pytest.raises(KubeconfigError, match=f"may not carry {named}"):
        load_sealed(document)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["clusters"][0]["cluster"].update(server="http://127.0.0.1:8080"), "https:// URL"),
        (lambda d: d["users"][0]["user"].pop("client-key-data"), "client-key-data"),
        (lambda d: d.pop("current-context"), "no current-context"),
        (lambda d: d.update(users="me"), "users must be a list"),
        (lambda d: d["users"][0]["user"].update({"client-key-data": 7}), "not valid base64"),
        (lambda d: d.update(preferences={}, **{"x-extra": 1}), "may not carry x-extra"),
    ],
)
def test_a_sealed_kubeconfig_of_another_shape_is_a_clear_error(change: Any, message: str) -> None:
    document = sealed_config()
    change(document)
    with pytest.raises(KubeconfigError, match=message):
        load_sealed(document)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


@given(
    top=st.dictionaries(st.sampled_from([*"abc", "current-context", "contexts", "clusters", "users"]), _json),
    section=st.sampled_from(["users", "clusters", "contexts"]),
    entry=_json,
)
def test_whatever_a_secret_holds_is_an_access_or_a_kubeconfig_error(
    top: dict[str, Any], section: str, entry: Any
) -> None:
    document = sealed_config() | top
    document[section] = [*(document.get(section) or []), entry] if isinstance(document.get(section), list) else entry
    try:
        access = load_sealed(document)
    except KubeconfigError:
        return
    assert (access.token, access.token_file, access.exec_plugin, access.insecure) == (None, None, None, False)
    assert access.server.startswith("https://")
