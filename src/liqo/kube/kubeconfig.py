"""How to reach and authenticate to one API server: kubeconfig files, in-cluster credentials, exec plugins.

We read kubeconfigs ourselves instead of through ``kubernetes_asyncio``: importing its client package
(needed for its loader) costs about 1.7 s, paid by every ``liqoctl`` invocation. The subset Kubernetes
users rely on is small — CA, client certificate, bearer token or token file, exec credential plugins,
``insecure-skip-tls-verify`` and ``tls-server-name`` — and is implemented here.

Secrets stay off the disk: embedded client keys are handed to OpenSSL through an anonymous memory file
(``memfd``), never a temporary file, and :class:`Access` never shows tokens in its ``repr``.

A kubeconfig is a program as much as a record: ``exec`` runs a command, ``tokenFile`` and certificate paths
read files, and the token they yield goes to whatever ``server`` says. That is what a person's own
kubeconfig is for, and why a kubeconfig read back from the API (an identity Secret) goes through
:func:`load_sealed` instead, which accepts data only.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from liqo.kube.timefmt import parse_time


class KubeconfigError(ValueError):
    """The kubeconfig is missing, malformed, or names a context/cluster/user it does not define."""


@dataclass(frozen=True)
class ExecPlugin:
    """A ``users[].user.exec`` credential plugin (client.authentication.k8s.io)."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"


@dataclass(frozen=True)
class Access:
    """Everything needed to open an authenticated connection to one API server."""

    server: str
    ca_pem: str | None = None
    cert_pem: str | None = field(default=None, repr=False)
    key_pem: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    token_file: str | None = None
    exec_plugin: ExecPlugin | None = None
    insecure: bool = False
    tls_server_name: str | None = None


def load_file(path: str | Path, *, context: str | None = None) -> Access:
    """The access of ``context`` (default: the current context) in a kubeconfig file."""
    path = Path(path)
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise KubeconfigError(f"kubeconfig {path} is not valid YAML: {exc}") from exc
    return load_dict(config, context=context, base=path.parent)


def load_dict(config: Any, *, context: str | None = None, base: Path | None = None) -> Access:
    """The access of ``context`` in a kubeconfig already parsed (relative paths resolve against ``base``)."""
    if not isinstance(config, Mapping):
        raise KubeconfigError("a kubeconfig must be a mapping")
    name = context or config.get("current-context")
    if not name:
        raise KubeconfigError("the kubeconfig has no current-context and no context was given")
    ctx = _named(config, "contexts", "context", name)
    cluster = _named(config, "clusters", "cluster", ctx.get("cluster"))
    user = _named(config, "users", "user", ctx.get("user")) if ctx.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise KubeconfigError(f"cluster {ctx.get('cluster')!r} has no server")
    exec_config = user.get("exec")
    return Access(
        server=str(server).rstrip("/"),
        ca_pem=_pem(cluster, "certificate-authority", base),
        cert_pem=_pem(user, "client-certificate", base),
        key_pem=_pem(user, "client-key", base),
        token=user.get("token"),
        token_file=_path(user.get("tokenFile"), base),
        exec_plugin=_exec_plugin(exec_config) if exec_config else None,
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name"),
    )


_SEALED_TOP = frozenset({"apiVersion", "kind", "clusters", "users", "contexts", "current-context", "preferences"})
_SEALED_CONTEXT = frozenset({"cluster", "user", "namespace"})
_SEALED_CLUSTER = frozenset({"server", "certificate-authority-data"})
_SEALED_USER = frozenset({"client-certificate-data", "client-key-data"})


def load_sealed(config: Any) -> Access:
    """The access of a kubeconfig holding only data: an ``https`` server, an embedded CA, client certificate and key.

    For a kubeconfig a program wrote and reads back from a place others may write too. Everything that
    would make the reader act — run a command (``exec``, ``auth-provider``), read a file (``tokenFile``, a
    certificate path), send a bearer token anywhere, go through a proxy, skip TLS verification — is refused
    naming the field, never honoured nor ignored. Only the current context is read.

    Raises:
        KubeconfigError: for any other shape, naming what is wrong (never another exception, whatever ``config`` is).
    """
    if not isinstance(config, Mapping):
        raise KubeconfigError("a kubeconfig must be a mapping")
    _only(config, _SEALED_TOP, where="the kubeconfig")
    name = config.get("current-context")
    if not isinstance(name, str) or not name:
        raise KubeconfigError("the kubeconfig has no current-context")
    ctx = _named(config, "contexts", "context", name)
    _only(ctx, _SEALED_CONTEXT, where=f"context {name!r}")
    cluster = _named(config, "clusters", "cluster", ctx.get("cluster"))
    _only(cluster, _SEALED_CLUSTER, where=f"cluster {ctx.get('cluster')!r}")
    user = _named(config, "users", "user", ctx.get("user"))
    _only(user, _SEALED_USER, where=f"user {ctx.get('user')!r}")
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith("https://") or len(server) > 2048:
        raise KubeconfigError("the server must be an https:// URL")
    cert_pem, key_pem = _pem(user, "client-certificate", None), _pem(user, "client-key", None)
    if not cert_pem or not key_pem:
        raise KubeconfigError("the user must carry client-certificate-data and client-key-data")
    return Access(
        server=server.rstrip("/"),
        ca_pem=_pem(cluster, "certificate-authority", None),
        cert_pem=cert_pem,
        key_pem=key_pem,
    )


def _only(section: Mapping[str, Any], allowed: frozenset[str], *, where: str) -> None:
    extra = sorted(str(key) for key in section if key not in allowed)
    if extra:
        raise KubeconfigError(f"{where} may not carry {', '.join(extra)}: only embedded data is accepted here")


SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster() -> Access:
    """The access of a pod to its own cluster: the service-account token (re-read as it rotates) and CA."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if not host:
        raise KubeconfigError("not running in a pod (KUBERNETES_SERVICE_HOST is unset): pass --kubeconfig")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    host = f"[{host}]" if ":" in host else host
    return Access(
        server=f"https://{host}:{port}",
        ca_pem=(SERVICE_ACCOUNT_DIR / "ca.crt").read_text(),
        token_file=str(SERVICE_ACCOUNT_DIR / "token"),
    )


def ssl_context(access: Access) -> ssl.SSLContext | None:
    """The TLS context for ``access`` (None for plain HTTP)."""
    if not access.server.startswith("https"):
        return None
    context = ssl.create_default_context(cadata=access.ca_pem) if access.ca_pem else ssl.create_default_context()
    if access.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if access.cert_pem and access.key_pem:
        load_cert_chain(context, access.cert_pem, access.key_pem)
    return context


def load_cert_chain(context: ssl.SSLContext, cert_pem: str, key_pem: str) -> None:
    """Load an in-memory certificate and key into ``context``.

    OpenSSL only loads certificates from files; a memfd is a file that never reaches a disk.
    """
    fd = os.memfd_create("liqo-client-cert", os.MFD_CLOEXEC)
    try:
        os.write(fd, (cert_pem.rstrip() + "\n" + key_pem).encode())
        context.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


class Authenticator:
    """Produces the ``Authorization`` header of each request, refreshing what expires.

    Token files are re-read (projected service-account tokens rotate), exec plugins are re-run when their
    credential expires. Certificates from an exec plugin are not supported (a clear error says so).
    """

    def __init__(self, access: Access) -> None:
        self._access = access
        self._token: str | None = access.token
        self._expires: datetime.datetime | None = None
        self._file_read_at = 0.0
        self._lock = asyncio.Lock()

    async def header(self) -> str | None:
        """``Bearer <token>``, or None when the access authenticates by certificate only."""
        access = self._access
        if access.token_file:
            loop_time = asyncio.get_running_loop().time()
            if self._token is None or loop_time - self._file_read_at > 60:
                self._token = (await asyncio.to_thread(Path(access.token_file).read_text)).strip()
                self._file_read_at = loop_time
        elif access.exec_plugin:
            async with self._lock:
                now = datetime.datetime.now(datetime.UTC)
                if self._token is None or (self._expires is not None and now >= self._expires):
                    self._token, self._expires = await _run_exec_plugin(access.exec_plugin)
        return f"Bearer {self._token}" if self._token else None

    def invalidate(self) -> None:
        """Forget a cached exec-plugin token (after a 401), so the next request gets a fresh one."""
        if self._access.exec_plugin:
            self._token = None


async def _run_exec_plugin(plugin: ExecPlugin) -> tuple[str, datetime.datetime | None]:
    exec_info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    env = dict(os.environ) | dict(plugin.env) | {"KUBERNETES_EXEC_INFO": orjson.dumps(exec_info).decode()}
    process = await asyncio.create_subprocess_exec(
        plugin.command,
        *plugin.args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    stdout, stderr = await process.communicate()
    if process.returncode != 0:
        raise KubeconfigError(
            f"exec credential plugin {plugin.command!r} failed ({process.returncode}): {stderr.decode()[:300]}"
        )
    try:
        status = orjson.loads(stdout).get("status") or {}
    except orjson.JSONDecodeError as exc:
        raise KubeconfigError(f"exec credential plugin {plugin.command!r} printed no ExecCredential") from exc
    token = status.get("token")
    if not token:
        raise KubeconfigError(f"exec credential plugin {plugin.command!r} returned no token (certificates unsupported)")
    expiry = status.get("expirationTimestamp")
    expires = parse_time(expiry) if expiry else None
    return str(token), expires


def _named(config: Mapping[str, Any], section: str, key: str, name: Any) -> dict[str, Any]:
    entries = config.get(section) or []
    if not isinstance(entries, list):
        raise KubeconfigError(f"{section} must be a list")
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            value = entry.get(key)
            return dict(value) if isinstance(value, Mapping) else {}
    raise KubeconfigError(f"the kubeconfig defines no {key} named {name!r}")


def _pem(section: Mapping[str, Any], key: str, base: Path | None) -> str | None:
    data = section.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(data, validate=True).decode()
        except (ValueError, TypeError) as exc:
            raise KubeconfigError(f"{key}-data is not valid base64") from exc
    path = _path(section.get(key), base)
    if not path:
        return None
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise KubeconfigError(f"cannot read {key} {path}: {exc.strerror}") from exc


def _path(value: Any, base: Path | None) -> str | None:
    if not value:
        return None
    path = Path(str(value)).expanduser()
    return str(path if path.is_absolute() or base is None else base / path)


def _exec_plugin(config: Mapping[str, Any]) -> ExecPlugin:
    command = config.get("command")
    if not command:
        raise KubeconfigError("an exec credential plugin needs a command")
    env = tuple((str(e["name"]), str(e["value"])) for e in config.get("env") or [])
    return ExecPlugin(
        command=str(command),
        args=tuple(str(a) for a in config.get("args") or []),
        env=env,
        api_version=str(config.get("apiVersion") or "client.authentication.k8s.io/v1"),
    )
