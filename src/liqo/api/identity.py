"""Who this cluster is: the identity ConfigMap written by ``liqoctl install`` and read by every component.

The ConfigMap is public within the cluster (its public key included); the private half of the cluster key
lives in its own Secret, read only by the manager (:func:`read_cluster_key`). It also records the cluster's
network (``podCIDR``, ``serviceCIDR``): what the manager tells peers at authentication, and what the virtual
kubelet translates peers' addresses against (:mod:`liqo.api.networks`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

import orjson

from liqo.api import names
from liqo.api.clusterkey import ClusterKey
from liqo.api.networks import POD_CIDR, SERVICE_CIDR, ClusterNetwork
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import CONFIGMAPS, SECRETS


@dataclass(frozen=True)
class ClusterIdentity:
    """A cluster's ID, name and the URLs peers reach it at."""

    cluster_id: str
    cluster_name: str
    api_server_url: str
    auth_url: str
    cluster_labels: dict[str, str]
    public_key: str = ""
    """The cluster key's public half (PEM), which peers verify this cluster's signatures with."""
    key_fingerprint: str = ""
    """Its fingerprint, ``sha256:<hex>``: what peers pin."""
    network: ClusterNetwork | None = None
    """Its pod and service CIDRs; None on a cluster installed before they were recorded (install again)."""

    @classmethod
    def from_configmap(cls, configmap: dict[str, Any]) -> ClusterIdentity:
        """Read the identity ConfigMap.

        Raises:
            InvalidNetwork: the recorded network was edited into one no cluster may claim.
        """
        data = configmap.get("data") or {}
        network = None
        if POD_CIDR in data or SERVICE_CIDR in data:
            recorded = {key: data.get(key) for key in (POD_CIDR, SERVICE_CIDR)}
            network = ClusterNetwork.from_message(recorded, field=f"ConfigMap {names.CLUSTER_IDENTITY}")
        return cls(
            cluster_id=data["clusterID"],
            cluster_name=data["clusterName"],
            api_server_url=data["apiServerURL"],
            auth_url=data["authURL"],
            cluster_labels=orjson.loads(data.get("clusterLabels") or "{}"),
            public_key=data.get("publicKey", ""),
            key_fingerprint=data.get("keyFingerprint", ""),
            network=network,
        )


async def read_identity(client: KubeClient) -> ClusterIdentity | None:
    """The installed identity of the cluster behind ``client``; None if liqo is not installed."""
    configmap = await client.get_or_none(CONFIGMAPS, names.CLUSTER_IDENTITY, namespace=names.LIQO_NAMESPACE)
    return None if configmap is None else ClusterIdentity.from_configmap(configmap)


async def read_cluster_key(client: KubeClient) -> ClusterKey | None:
    """This cluster's key pair from its Secret; None if liqo is not installed (yet)."""
    try:
        secret = await client.get(SECRETS, names.CLUSTER_KEY_SECRET, namespace=names.LIQO_NAMESPACE)
    except NotFoundError:
        return None
    return ClusterKey.from_pem(base64.b64decode(secret["data"]["privateKey"]).decode())
