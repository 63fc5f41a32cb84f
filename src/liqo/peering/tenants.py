"""Tenant namespaces: where everything about one peer lives, on both sides of a peering."""

from __future__ import annotations

from typing import Any

from liqo.api import names


def tenant_namespace_manifest(peer_id: str) -> dict[str, Any]:
    """The tenant namespace of ``peer_id`` (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": names.tenant_namespace(peer_id),
            "labels": names.peer_labels(peer_id) | {names.TENANT: "true"},
        },
    }
