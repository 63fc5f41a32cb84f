"""How the API server finds and trusts the webhooks: their registration names, certificate and CA bundle.

(Kept apart from :mod:`liqo.offloading.pod_webhook` so that ``liqoctl install``, which writes the
registrations, does not import the HTTP server.)

Two webhooks, both served by every manager replica on the webhook listener (not the authentication
listener peers reach, docs/security.md, "Webhooks"): the pod mutator and the ShadowPod validator. The API
server verifies the listener's certificate against the ``caBundle`` of each configuration. On a local
cluster install writes that bundle itself: the certificate comes from the cluster's CA and the webhooks are
called by URL on loopback. On a real cluster they are called through the ``liqo-webhook`` Service, so:

- every replica must serve the *same* certificate, or the API server would trust only whichever replica
  last published its CA, and a rolling update would refuse pods while old and new replicas overlap. The
  pair lives in one Secret; the first replica creates it, the others (and later restarts) reuse it, and
  a replica that finds it close to expiry (or not covering the Service's names) replaces it — a
  conflicting write means another replica did it first, and its pair is used;
- each replica publishes the CA into each configuration's ``caBundle`` if it is not there yet (a
  strategic-merge patch of that one field, which the install never sets when the managers serve this pair,
  so a re-install or ``helm upgrade`` does not erase it);
- the pair is short-lived (:data:`LEAF_VALIDITY`) and rotated while the managers run: every replica reads
  the Secret every :data:`REFRESH` and serves what it finds, renewing it when it is due. A renewed pair's
  ``ca.crt`` carries the new CA *and* the previous one, so the published bundle trusts both, and a replica
  still serving the old certificate for up to a minute is never refused by the API server.

Where the API server calls the webhooks by URL through a node port (local clusters with real nodes, whose
API server cannot reach pod or Service addresses), the certificate also names the URL's IP address.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509

from liqo.api import names
from liqo.api.components import AUTH_SERVICE, WEBHOOK_SERVICE
from liqo.kube import pki
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, KubeError, NotFoundError
from liqo.kube.resources import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS, VALIDATING_WEBHOOK_CONFIGURATIONS, Resource

log = logging.getLogger(__name__)

WEBHOOK_CONFIGURATION = "liqo-pod-mutator"
"""The MutatingWebhookConfiguration registering the webhook (cluster-scoped)."""
WEBHOOK_NAME = "pods.offloading.liqo.io"
"""The webhook's name in that configuration: what the API server names in its errors."""
PATH = "/mutate/pods"
"""Where the manager's webhook listener serves the pod webhook."""
VALIDATING_CONFIGURATION = "liqo-shadowpod-validator"
"""The ValidatingWebhookConfiguration registering the ShadowPod webhook (cluster-scoped)."""
VALIDATING_WEBHOOK_NAME = "shadowpods.offloading.liqo.io"
VALIDATE_PATH = "/validate/shadowpods"
"""Where the manager's webhook listener serves the ShadowPod webhook."""
REGISTRATIONS: tuple[tuple[Resource, str, str], ...] = (
    (MUTATING_WEBHOOK_CONFIGURATIONS, WEBHOOK_CONFIGURATION, WEBHOOK_NAME),
    (VALIDATING_WEBHOOK_CONFIGURATIONS, VALIDATING_CONFIGURATION, VALIDATING_WEBHOOK_NAME),
)
"""Every webhook configuration liqo installs: (resource, configuration name, webhook name)."""

SERVING_SECRET = "liqo-manager-tls"
"""Secret (``kubernetes.io/tls``, plus ``ca.crt``) holding the pair every manager replica serves."""
RENEW_BEFORE = datetime.timedelta(days=2)
"""A pair expiring sooner than this is replaced."""
LEAF_VALIDITY = datetime.timedelta(days=7)
REFRESH = 60.0
"""Seconds between two reads of the Secret by each replica."""
_ATTEMPTS = 3


@dataclass(frozen=True)
class ServingPair:
    """A serving certificate, its key and the CA that signed it (all PEM)."""

    cert: str
    key: str
    ca: str


def service_dns_names(*, service: str, namespace: str) -> list[str]:
    """The names a Service is called by in the cluster; the API server uses ``<service>.<namespace>.svc``."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc", f"{service}.{namespace}.svc.cluster.local"]


def new_pair(
    *,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str] = (),
    previous: ServingPair | None = None,
    now: datetime.datetime | None = None,
) -> ServingPair:
    """A fresh CA and a serving certificate for ``dns_names`` and ``ip_addresses`` signed by it.

    With ``previous``, its CA (the first in its bundle) follows the new one in ``ca``, so a client given the
    new bundle still trusts a server that has not loaded the new pair yet.
    """
    ca = pki.make_ca("liqo-manager-ca", now=now)
    leaf = pki.issue(
        ca,
        common_name=dns_names[0],
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        server=True,
        validity=LEAF_VALIDITY,
        now=now,
    )
    bundle = ca.cert.decode()
    if previous is not None:
        bundle += _first_pem(previous.ca)
    return ServingPair(cert=leaf.cert.decode(), key=leaf.key.decode(), ca=bundle)


def _first_pem(bundle: str) -> str:
    end = "-----END CERTIFICATE-----"
    head, sep, _ = bundle.partition(end)
    return f"{head}{sep}\n" if sep else ""


def pair_from_secret(secret: Mapping[str, Any]) -> ServingPair | None:
    """The pair a Secret holds, if it holds a complete one."""
    data = secret.get("data") or {}
    try:
        cert, key, ca = (base64.b64decode(data[k]).decode() for k in ("tls.crt", "tls.key", "ca.crt"))
    except (KeyError, ValueError, TypeError):
        return None
    return ServingPair(cert=cert, key=key, ca=ca)


def usable(
    pair: ServingPair, *, dns_names: Sequence[str], now: datetime.datetime, ip_addresses: Sequence[str] = ()
) -> bool:
    """Whether ``pair`` covers ``dns_names`` and ``ip_addresses`` and stays valid beyond :data:`RENEW_BEFORE`."""
    try:
        cert = x509.load_pem_x509_certificate(pair.cert.encode())
        ca = x509.load_pem_x509_certificate(pair.ca.encode())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    covered = set(sans.get_values_for_type(x509.DNSName))
    addresses = {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)}
    expiry = min(cert.not_valid_after_utc, ca.not_valid_after_utc)
    return set(dns_names) <= covered and set(ip_addresses) <= addresses and expiry - now > RENEW_BEFORE


def serving_secret(pair: ServingPair, *, namespace: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The Secret holding ``pair``."""

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": SERVING_SECRET, "namespace": namespace, "labels": dict(labels)},
        "data": {"tls.crt": b64(pair.cert), "tls.key": b64(pair.key), "ca.crt": b64(pair.ca)},
    }


def ca_bundle_patch(
    configuration: Mapping[str, Any], *, ca_pem: str, webhook: str = WEBHOOK_NAME
) -> dict[str, Any] | None:
    """The strategic-merge patch publishing ``ca_pem`` for ``webhook``, or None when there is nothing to do.

    Nothing to do when the bundle is already ``ca_pem``. (The caller publishes only the pair it serves from
    the shared Secret: where install wrote the bundle itself, a host process's, it never calls this.)
    """
    bundle = base64.b64encode(ca_pem.encode()).decode()
    for hook in configuration.get("webhooks") or []:
        if hook.get("name") != webhook:
            continue
        if (hook.get("clientConfig") or {}).get("caBundle") == bundle:
            return None
        return {"webhooks": [{"name": webhook, "clientConfig": {"caBundle": bundle}}]}
    return None


def url_addresses(configuration: Mapping[str, Any]) -> list[str]:
    """The IP addresses the configuration's webhooks are called at by URL (pure)."""
    found = []
    for hook in configuration.get("webhooks") or []:
        host = urlsplit((hook.get("clientConfig") or {}).get("url") or "").hostname
        with contextlib.suppress(ValueError):
            if host:
                found.append(str(ipaddress.ip_address(host)))
    return found


async def called_addresses(client: KubeClient) -> list[str]:
    """The IP addresses any of liqo's webhooks is called at (their certificate must name them)."""
    found: set[str] = set()
    for resource, name, _ in REGISTRATIONS:
        with contextlib.suppress(NotFoundError):
            found.update(url_addresses(await client.get(resource, name)))
    return sorted(found)


async def shared_serving_pair(
    client: KubeClient,
    *,
    namespace: str,
    dns_names: Sequence[str],
    labels: Mapping[str, str],
    ip_addresses: Sequence[str] = (),
) -> ServingPair:
    """The pair every replica serves: the Secret's if usable, else a new one written there first.

    Raises:
        ConflictError: other writers kept winning (after a few attempts).
    """
    for _ in range(_ATTEMPTS):
        now = datetime.datetime.now(datetime.UTC)
        try:
            secret: dict[str, Any] | None = await client.get(SECRETS, SERVING_SECRET, namespace=namespace)
        except NotFoundError:
            secret = None
        current = pair_from_secret(secret) if secret is not None else None
        if current is not None and usable(current, dns_names=dns_names, ip_addresses=ip_addresses, now=now):
            return current
        pair = new_pair(dns_names=dns_names, ip_addresses=ip_addresses, previous=current, now=now)
        desired = serving_secret(pair, namespace=namespace, labels=labels)
        try:
            if secret is None:
                await client.create(SECRETS, desired)
            else:
                desired["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]
                await client.replace(SECRETS, desired)
        except ConflictError:
            continue  # another replica wrote it meanwhile: read theirs
        log.info("new serving certificate for %s in Secret %s/%s", ", ".join(dns_names), namespace, SERVING_SECRET)
        return pair
    raise ConflictError(409, "Conflict", f"Secret {namespace}/{SERVING_SECRET} keeps changing under us")


async def publish_ca_bundle(
    client: KubeClient,
    *,
    ca_pem: str,
    resource: Resource = MUTATING_WEBHOOK_CONFIGURATIONS,
    name: str = WEBHOOK_CONFIGURATION,
    webhook: str = WEBHOOK_NAME,
) -> bool:
    """Put ``ca_pem`` in the configuration's ``caBundle`` for ``webhook`` if it is called through a Service.

    Returns:
        Whether the configuration was patched. A missing configuration is logged, not raised: the pod
        webhook is not registered where the pod placement policy stands in for it
        (:mod:`liqo.offloading.placementpolicy`), and the rest of the manager works without either webhook.
    """
    try:
        configuration = await client.get(resource, name)
    except NotFoundError:
        log.info("%s %s is not registered: its webhook is not called", resource.kind, name)
        return False
    patch = ca_bundle_patch(configuration, ca_pem=ca_pem, webhook=webhook)
    if patch is None:
        return False
    await client.patch(resource, name, patch, patch_type="strategic")
    log.info("published the serving CA in %s %s", resource.kind, name)
    return True


async def publish_ca_bundles(client: KubeClient, *, ca_pem: str) -> None:
    """:func:`publish_ca_bundle` for every configuration of :data:`REGISTRATIONS`."""
    for resource, name, webhook in REGISTRATIONS:
        await publish_ca_bundle(client, ca_pem=ca_pem, resource=resource, name=name, webhook=webhook)


async def manager_serving_pair(client: KubeClient) -> ServingPair:
    """The pair every manager replica serves on both listeners when no files are given (authentication, webhooks).

    One pair for both: the API server trusts one bundle, and peers reach the same replicas.
    """
    dns_names = [
        *service_dns_names(service=WEBHOOK_SERVICE, namespace=names.LIQO_NAMESPACE),
        *service_dns_names(service=AUTH_SERVICE, namespace=names.LIQO_NAMESPACE),
    ]
    return await shared_serving_pair(
        client,
        namespace=names.LIQO_NAMESPACE,
        dns_names=dns_names,
        ip_addresses=await called_addresses(client),
        labels={names.MANAGED_BY: names.MANAGED_BY_VALUE},
    )


async def follow_manager_serving_pair(
    client: KubeClient,
    serving: ServingPair,
    *,
    install: Callable[[tuple[str, str]], None],
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Serve the Secret's pair as it rotates (read every :data:`REFRESH`): ``install`` each new one, publish its CA.

    Runs for as long as the pair is served; a failed read is logged, and the current pair served meanwhile.
    """
    while True:
        await sleep(REFRESH)
        try:
            pair = await manager_serving_pair(client)
        except KubeError as exc:
            log.warning("cannot read the serving pair (still serving the current one): %s", exc)
            continue
        if pair == serving:
            continue
        install((pair.cert, pair.key))
        await publish_ca_bundles(client, ca_pem=pair.ca)
        log.info("now serving the rotated certificate")
        serving = pair
