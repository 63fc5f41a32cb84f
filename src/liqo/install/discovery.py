"""LAN discovery's part of an install: the source ``lan``, its listener, the listener's rights (pure).

Off unless asked (``liqoctl install --discovery``, ``discovery.lan.enabled``): announcing tells everyone on
the nodes' network that this cluster exists and where its authentication endpoint is, which an operator
chooses to do. On, the install makes the DiscoverySource ``lan`` (its type only: the policy fields are the
operator's, and a re-install leaves them as they are) and the listener, one host-network pod on a node, bound
to that node's address (the downward API's ``status.hostIP``), so multicast goes out on the nodes' LAN and no
other interface.

The listener parses strangers' packets (multicast answers, zones), so it holds the least rights of any
component (docs/security.md, "Discovery"): read the DiscoverySources and write their status (an operator
names DNS sources as they like, so not by name), read the identity ConfigMap it announces (by name). It has
no listener of its own (in the node's network a fixed port would collide with whatever the node runs), so no
probes: it fails by exiting. It also looks up every DNS source's zone.
"""

from __future__ import annotations

from typing import Any

from liqo.api import names
from liqo.api import resources as liqo_resources
from liqo.api.components import DISCOVERY
from liqo.api.discoverysources import LAN_SOURCE, SourceType
from liqo.install.podspec import placement, restricted_container
from liqo.install.values import Values

Manifest = dict[str, Any]
_READ = ["get", "list", "watch"]


def discovery_rules() -> list[dict[str, Any]]:
    """The listener's cluster-wide rights: the sources (an operator names DNS sources as they like), their status."""
    group, plural = liqo_resources.DISCOVERY_SOURCES.group, liqo_resources.DISCOVERY_SOURCES.plural
    return [
        {"apiGroups": [group], "resources": [plural], "verbs": _READ},
        {"apiGroups": [group], "resources": [f"{plural}/status"], "verbs": ["patch"]},
    ]


def discovery_namespace_rules() -> list[dict[str, Any]]:
    """The listener's rights in ``liqo``: the identity it announces."""
    return [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [names.CLUSTER_IDENTITY], "verbs": _READ}]


def lan_source() -> Manifest:
    """The DiscoverySource ``lan``, its type only."""
    resource = liqo_resources.DISCOVERY_SOURCES
    return {
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": {"name": LAN_SOURCE, "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE}},
        "spec": {"type": SourceType.LAN.value},
    }


def lan_listener(values: Values) -> Manifest:
    """The listener's Deployment: one replica, replaced (never two announcing at once), in a node's network."""
    labels = {"app.kubernetes.io/name": DISCOVERY}
    container = {
        "name": "discovery",
        "image": values.image,
        "imagePullPolicy": values.image_pull_policy,
        "command": ["python3", "-m", "liqo.apps.discovery"],
        "args": [f"--source={LAN_SOURCE}", "--address=$(HOST_IP)", "--metrics-address="],
        "env": [{"name": "HOST_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}],
        "resources": dict(values.discovery_resources),
        "securityContext": restricted_container(),
    }
    pod: dict[str, Any] = {
        "serviceAccountName": DISCOVERY,
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        # Long enough for the goodbye (zeroconf sends it three times, 250 ms apart).
        "terminationGracePeriodSeconds": 10,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        **placement(values),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": DISCOVERY,
            "namespace": names.LIQO_NAMESPACE,
            "labels": {names.MANAGED_BY: names.MANAGED_BY_VALUE, **labels},
        },
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
