"""What the tether modules share: an enterprise accepting the laptop's tether, where a cluster's pods run, its
virtual node for a peer, and a PodDisruptionBudget."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from liqo.api import names
from liqo.api.resources import RESOURCE_OFFERS, VIRTUAL_NODES
from liqo.kube.client import KubeClient
from liqo.kube.objects import Obj
from liqo.kube.resources import PODS, Resource
from tests.integration.helpers import Site, sharing_policy
from tests.shared import eventually

PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True)


@contextlib.asynccontextmanager
async def accepting(corp: KubeClient, home: KubeClient, *, laptop: Site, enterprise: Site) -> AsyncIterator[None]:
    """The enterprise's SharingPolicy for the laptop accepting its tether (offering everything), for the duration;
    entered once the laptop holds an offer saying so."""
    async with sharing_policy(corp, laptop.cluster_id, prefix="tether", tethering="Accept", percentage=100):
        corp_namespace = names.tenant_namespace(enterprise.cluster_id)

        async def accepted() -> bool:
            offer = await home.get_or_none(RESOURCE_OFFERS, enterprise.cluster_id, namespace=corp_namespace)
            return bool(((offer or {}).get("spec") or {}).get("acceptsTethering"))

        await eventually(accepted, timeout=60, message="the enterprise's offer accepting tethered clusters")
        yield


async def budget(client: KubeClient, namespace: str, app: str) -> None:
    """A PodDisruptionBudget letting one pod of ``app`` go at a time."""
    spec = {"maxUnavailable": 1, "selector": {"matchLabels": {"app": app}}}
    body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": app, "namespace": namespace}}
    await client.create(PDBS, body | {"spec": spec})


async def placed(client: KubeClient, namespace: str, *, count: int, where: Any, timeout: float = 120) -> list[Obj]:
    """Until ``count`` live pods of ``namespace`` are Running and ``where(node)`` holds for each one's node."""
    last: list[Obj] = []

    async def check() -> bool:
        pods, _ = await client.list_all(PODS, namespace=namespace)
        last[:] = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        running = [p for p in last if (p.get("status") or {}).get("phase") == "Running"]
        return len(last) == len(running) == count and all(where(p["spec"].get("nodeName")) for p in running)

    def said() -> str:
        seen = collections.Counter(
            f"{(p.get('spec') or {}).get('nodeName')}/{(p.get('status') or {}).get('phase')}" for p in last
        )
        return f"{count} pods Running where asked in {client.name}/{namespace}; last: {dict(seen)}"

    await eventually(check, timeout=timeout, message=said)
    return last


async def virtual_node_of(client: KubeClient, peer_id: str) -> str:
    nodes, _ = await client.list_all(VIRTUAL_NODES, namespace=names.tenant_namespace(peer_id))
    return str(nodes[0]["metadata"]["name"])
