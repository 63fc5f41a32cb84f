"""Who this cluster is: the identity ConfigMap written by ``liqoctl install`` and read by every component."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from liqo.api import names
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import CONFIGMAPS


@dataclass(frozen=True)
class ClusterIdentity:
    """A cluster's ID, name and the URLs peers reach it at."""

    cluster_id: str
    cluster_name: str
    api_server_url: str
    auth_url: str
    cluster_labels: dict[str, str]

    @classmethod
    def from_configmap(cls, configmap: dict[str, Any]) -> ClusterIdentity:
        """Read the identity ConfigMap."""
        data = configmap.get("data") or {}
        return cls(
            cluster_id=data["clusterID"],
            cluster_name=data["clusterName"],
            api_server_url=data["apiServerURL"],
            auth_url=data["authURL"],
            cluster_labels=orjson.loads(data.get("clusterLabels") or "{}"),
        )


async def read_identity(client: KubeClient) -> ClusterIdentity | None:
    """The installed identity of the cluster behind ``client``; None if liqo is not installed."""
    try:
        configmap = await client.get(CONFIGMAPS, names.CLUSTER_IDENTITY, namespace=names.LIQO_NAMESPACE)
    except NotFoundError:
        return None
    return ClusterIdentity.from_configmap(configmap)
