"""ResourceRequest operations shared by the consumer's controllers (peering teardown and the replicator)."""

from __future__ import annotations

from liqo.api import names
from liqo.api.resources import RESOURCE_REQUESTS
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError

_GONE = (404, 403)
"""Not found, or not allowed to look any more (the provider released our tenant namespace and RBAC)."""


async def withdraw(provider: KubeClient, *, consumer_id: str) -> None:
    """Delete our ResourceRequest on the provider behind ``provider``.

    Already gone, or our rights gone with it (the provider released our tenant namespace first): both
    mean the request is withdrawn.
    """
    try:
        await provider.delete(RESOURCE_REQUESTS, consumer_id, namespace=names.tenant_namespace(consumer_id))
    except ApiError as exc:
        if exc.status not in _GONE:
            raise


async def withdrawn(provider: KubeClient, *, consumer_id: str) -> bool:
    """Whether our request is gone from the provider; if not, delete it (and let the caller look again)."""
    try:
        await provider.get(RESOURCE_REQUESTS, consumer_id, namespace=names.tenant_namespace(consumer_id))
    except ApiError as exc:
        if exc.status in _GONE:
            return True
        raise
    await withdraw(provider, consumer_id=consumer_id)
    return False
