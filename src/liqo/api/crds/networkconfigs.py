"""The NetworkConfig CRD: one cluster's side of the network fabric with a peer (pure)."""

from __future__ import annotations

from typing import Any

from liqo.api.crds.schema import (
    GATEWAY_ROLES,
    WIREGUARD_KEY_PATTERN,
    cidr,
    cluster_id,
    column,
    crd,
    enum,
    integer,
    string,
    struct,
    timestamp,
)
from liqo.api.networkconfigs import ConnectionState
from liqo.api.networks import POD_CIDR
from liqo.api.resources import (
    NETWORK_CONFIGS,
)


def network_config_crd() -> dict[str, Any]:
    """NetworkConfig (namespaced in the other cluster's tenant namespace, named after its author's ID).

    One cluster's word to one peer about the network between them: the author's pod CIDR, how the author
    names the peer's pods, and its gateway's public key (and, serving, its endpoint). Each side writes its
    own and reads the other's (:mod:`liqo.network.configs`); the status is the author's gateway's own view
    of the tunnel and never leaves the author's cluster.
    """
    spec = struct(
        "The author's side of the network between it and the other cluster.",
        {
            "clusterID": cluster_id("The author's cluster ID.", immutable=True),
            POD_CIDR: cidr("The author's pod CIDR."),
            "remappedPodCIDR": cidr(
                "Where the author sees the other cluster's pods: their pod CIDR itself when it is free for the"
                " author, else a free block of the same size."
            ),
            "gateway": struct(
                "The author's gateway for this peer.",
                {
                    "role": enum("Server: it listens; Client: it dials the other side's server.", GATEWAY_ROLES),
                    "publicKey": string("Its WireGuard public key (base64).", pattern=WIREGUARD_KEY_PATTERN),
                    "endpoint": struct(
                        "Where a server is reached from the other cluster, once its pod runs.",
                        {
                            "address": string("An IP address.", minLength=2, maxLength=45),
                            "port": integer("A UDP port.", minimum=1, maximum=65535),
                        },
                        required=("address", "port"),
                    ),
                },
                required=("role",),
            ),
        },
        required=("clusterID", POD_CIDR, "remappedPodCIDR"),
    )
    status = struct(
        "The author's gateway's view of the tunnel (in the author's cluster only).",
        {
            "connection": struct(
                "The connection check: probes through the tunnel to the other gateway.",
                {
                    "state": enum("Whether probes are answered.", tuple(ConnectionState)),
                    "latency": string("The round trip of the latest answered probe (e.g. 0.8ms)."),
                    "reason": string("A machine-readable, CamelCase reason for the state."),
                    "message": string("A human-readable explanation of the state."),
                    "lastTransitionTime": timestamp("When the state last changed."),
                    "lastHandshakeTime": timestamp("The latest WireGuard handshake with the other gateway."),
                },
            ),
        },
    )
    return crd(
        NETWORK_CONFIGS,
        short_name="netcfg",
        description="One cluster's side of the network fabric between it and a peer.",
        spec=spec,
        status=status,
        columns=[
            column("Cluster", ".spec.clusterID"),
            column("Pods", ".spec.podCIDR"),
            column("Peer pods at", ".spec.remappedPodCIDR"),
            column("Role", ".spec.gateway.role"),
            column("Connection", ".status.connection.state"),
            column("Latency", ".status.connection.latency"),
        ],
    )
