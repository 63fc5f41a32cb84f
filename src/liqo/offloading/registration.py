"""How the API server finds and trusts the webhooks: their registration names, certificate and CA bundle.

(Kept apart from :mod:`liqo.offloading.webhook` so that ``liqoctl install``, which writes the
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
- at start-up each replica publishes the CA into each configuration's ``caBundle`` if it is not there yet
  (a strategic-merge patch of that one field, which ``liqoctl install`` never sets for a Service, so a
  re-install does not erase it).
"""

from __future__ import annotations

import base64
import datetime
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography import x509

from liqo.kube import pki
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, NotFoundError
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
RENEW_BEFORE = datetime.timedelta(days=30)
"""A pair expiring sooner than this is replaced at start-up."""
LEAF_VALIDITY = datetime.timedelta(days=365)
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


def new_pair(*, dns_names: Sequence[str], now: datetime.datetime | None = None) -> ServingPair:
    """A fresh CA and a serving certificate for ``dns_names`` signed by it."""
    ca = pki.make_ca("liqo-manager-ca", now=now)
    leaf = pki.issue(ca, common_name=dns_names[0], dns_names=dns_names, server=True, validity=LEAF_VALIDITY, now=now)
    return ServingPair(cert=leaf.cert.decode(), key=leaf.key.decode(), ca=ca.cert.decode())


def pair_from_secret(secret: Mapping[str, Any]) -> ServingPair | None:
    """The pair a Secret holds, if it holds a complete one."""
    data = secret.get("data") or {}
    try:
        cert, key, ca = (base64.b64decode(data[k]).decode() for k in ("tls.crt", "tls.key", "ca.crt"))
    except (KeyError, ValueError, TypeError):
        return None
    return ServingPair(cert=cert, key=key, ca=ca)


def usable(pair: ServingPair, *, dns_names: Sequence[str], now: datetime.datetime) -> bool:
    """Whether ``pair`` covers ``dns_names`` and stays valid for more than :data:`RENEW_BEFORE`."""
    try:
        cert = x509.load_pem_x509_certificate(pair.cert.encode())
        ca = x509.load_pem_x509_certificate(pair.ca.encode())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    covered = set(sans.get_values_for_type(x509.DNSName))
    expiry = min(cert.not_valid_after_utc, ca.not_valid_after_utc)
    return set(dns_names) <= covered and expiry - now > RENEW_BEFORE


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

    Nothing to do when the webhook is called by URL (a local cluster: install wrote the bundle) or when
    the bundle is already ``ca_pem``.
    """
    bundle = base64.b64encode(ca_pem.encode()).decode()
    for hook in configuration.get("webhooks") or []:
        if hook.get("name") != webhook:
            continue
        client_config = hook.get("clientConfig") or {}
        if "service" not in client_config or client_config.get("caBundle") == bundle:
            return None
        return {"webhooks": [{"name": webhook, "clientConfig": {"caBundle": bundle}}]}
    return None


async def shared_serving_pair(
    client: KubeClient, *, namespace: str, dns_names: Sequence[str], labels: Mapping[str, str]
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
        if current is not None and usable(current, dns_names=dns_names, now=now):
            return current
        pair = new_pair(dns_names=dns_names, now=now)
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
        Whether the configuration was patched. A missing configuration (liqo installed by an older
        version) is logged, not raised: the rest of the manager works without the webhook.
    """
    try:
        configuration = await client.get(resource, name)
    except NotFoundError:
        log.warning("%s %s not found: its webhook is not called", resource.kind, name)
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
