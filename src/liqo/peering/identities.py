"""The identities this cluster holds on its providers: written as Secrets, renewed before they expire.

An identity is a kubeconfig with a short-lived client certificate, kept in Secret ``liqo-identity`` of
the provider's tenant namespace. Reading it back into clients is :mod:`liqo.api.peers`, shared with the
virtual kubelet.
"""

from __future__ import annotations

import base64
import datetime
from typing import Any

import orjson

from liqo.api import names
from liqo.api.peers import IDENTITY_LABEL
from liqo.kube.csr import renewal_time
from liqo.kube.timefmt import format_time, parse_time

ISSUED_AT = "liqo.io/issued-at"


def identity_secret(
    *,
    provider_id: str,
    kubeconfig: dict[str, Any],
    issued_at: datetime.datetime,
    expires_at: datetime.datetime,
) -> dict[str, Any]:
    """The Secret holding the identity issued by ``provider_id`` (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.IDENTITY_SECRET,
            "namespace": names.tenant_namespace(provider_id),
            "labels": names.peer_labels(provider_id) | {IDENTITY_LABEL: "true"},
            "annotations": {ISSUED_AT: format_time(issued_at), names.EXPIRES_AT: format_time(expires_at)},
        },
        "type": "Opaque",
        "data": {"kubeconfig": base64.b64encode(orjson.dumps(kubeconfig)).decode()},
    }


def renewal_due(secret: dict[str, Any] | None) -> datetime.datetime | None:
    """When the identity in ``secret`` must be renewed (None: there is no usable identity: get one now)."""
    if not secret or not (secret.get("data") or {}).get("kubeconfig"):
        return None
    annotations = secret["metadata"].get("annotations") or {}
    try:
        issued = parse_time(annotations[ISSUED_AT])
        expires = parse_time(annotations[names.EXPIRES_AT])
    except (KeyError, ValueError):
        return None
    return renewal_time(not_before=issued, not_after=expires)


def expires_at(secret: dict[str, Any] | None) -> str | None:
    """The expiry annotation of an identity Secret."""
    return ((secret or {}).get("metadata", {}).get("annotations") or {}).get(names.EXPIRES_AT)
