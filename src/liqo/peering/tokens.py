"""The provider's enrolment token: what a consumer it does not know yet must prove it holds.

One token per provider, in Secret ``liqo/liqo-auth-token``, handed out of band (``liqoctl generate
peer-command``) and kept by the consumer in ``liqo-peer-token`` of its tenant namespace. It only admits new
consumers: an enrolled consumer renews with its cluster key, so minting a new token (``generate
peer-command --rotate-token``) invalidates the commands given out before without breaking any peering.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from liqo.api import names


def new_token() -> str:
    """32 random bytes, base64url: out of reach of any offline guess at the HMACs made with it."""
    return secrets.token_urlsafe(32)


def token_secret(token: str) -> dict[str, Any]:
    """The provider's Secret holding ``token`` (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": names.AUTH_TOKEN_SECRET,
            "namespace": names.LIQO_NAMESPACE,
            "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE},
        },
        "type": "Opaque",
        "stringData": {"token": token},
    }


def token_of(secret: dict[str, Any] | None) -> str | None:
    """The token a Secret holds (the provider's own, or a consumer's ``liqo-peer-token``)."""
    data = (secret or {}).get("data") or {}
    return base64.b64decode(data["token"]).decode() if data.get("token") else None
