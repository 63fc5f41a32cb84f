"""The node agent: on every node, the routes to where peers' pods are seen, through their gateway pods.

One agent per node (a DaemonSet with the node's network). From the gateway pods alone — each carries where
we see its peer's pods (:data:`liqo.network.gateway_objects.PEER_CIDR`) and says where it runs — it derives the
routes this node needs (:func:`wanted_routes`, pure): a gateway on this node is reached at its pod IP, one
on another node through that node's address (which then routes to its own pod). Beside them, one nftables
table keeps the CNI's masquerade away from that traffic (:func:`liqo.network.rules.node_ruleset`): the
peer must see our pods' own addresses, and the routing is asymmetric (pod → node → gateway, gateway → pod),
which a conntrack-based rule would count as invalid. The same table keeps the node from redirecting its
pods straight to a gateway pod, whose address changes when it restarts.

The routes are not taken on trust: each must lead into the peer pools, and shadow no route of the node
that is not liqo's (:func:`liqo.network.rules.route_refusal`). A refused route is not made (one of liqo's
there already is removed), its peer's CIDR gets no NAT exemption either, the rest of the node stays as it
was, and a warning says why, once per change.

Everything is reconciled: a restarted gateway (a new pod IP), a restarted agent, or a route someone deleted
converge again within :data:`RESYNC`. Only routes with our protocol number and our own table are ever
read, changed or removed, so nothing the node's other software wrote is touched. When the last gateway
goes, the routes and the table go with it.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from liqo.api import names
from liqo.kube.client import KubeClient
from liqo.kube.controller import Controller, Result
from liqo.kube.informer import Informer
from liqo.kube.resources import PODS, terminating
from liqo.network import gateway_objects, ipam, rules
from liqo.network.runner import Runner

log = logging.getLogger(__name__)

TABLE = "liqo-node"
RESYNC = 30.0
KEY = "node"


def wanted_routes(pods: Iterable[Mapping[str, Any]], *, node_name: str) -> list[rules.RouteSpec]:
    """The routes this node needs to the running gateways' peers (pure).

    A gateway not running yet (no pod IP) gets no route: packets would go nowhere either way, and the
    CNI's own routes stay in charge.
    """
    routes: dict[str, rules.RouteSpec] = {}
    for pod in pods:
        meta, status = pod.get("metadata") or {}, pod.get("status") or {}
        cidr = (meta.get("annotations") or {}).get(gateway_objects.PEER_CIDR)
        if not cidr or terminating(dict(pod)) or status.get("phase") != "Running":
            continue
        here = (pod.get("spec") or {}).get("nodeName") == node_name
        via = status.get("podIP") if here else status.get("hostIP")
        if not via:
            continue
        try:
            destination = ipaddress.IPv4Network(cidr)
            gateway = ipaddress.IPv4Address(via)
        except ValueError:
            log.warning("gateway pod %s has an unusable route (%s via %s)", meta.get("name"), cidr, via)
            continue
        routes[str(destination)] = rules.RouteSpec(destination=destination, via=gateway)
    return [routes[key] for key in sorted(routes)]


def allowed_routes(
    routes: Iterable[rules.RouteSpec],
    *,
    pools: Sequence[ipaddress.IPv4Network],
    foreign: Sequence[ipaddress.IPv4Network],
) -> tuple[list[rules.RouteSpec], dict[str, str]]:
    """The routes this node may make, and why each other one may not (by ``"<destination> via <next hop>"``) (pure).

    See :func:`liqo.network.rules.route_refusal`; ``foreign`` are the node's routes that are not liqo's.
    """
    allowed: list[rules.RouteSpec] = []
    refused: dict[str, str] = {}
    for route in routes:
        reason = rules.route_refusal(route.destination, pools=pools, foreign=foreign)
        if reason is None:
            allowed.append(route)
        else:
            refused[f"{route.destination} via {route.via}"] = reason
    return allowed, refused


class NodeAgent:
    """Keeps this node's routes and NAT exemptions in step with the gateway pods."""

    def __init__(
        self,
        *,
        client: KubeClient,
        runner: Runner,
        node_name: str,
        pools: Sequence[ipaddress.IPv4Network] = ipam.DEFAULT_POOLS,
    ) -> None:
        self._runner = runner
        self._node_name = node_name
        self._pools = tuple(pools)
        self.pods = Informer(
            client=client,
            resource=PODS,
            namespace=names.LIQO_NAMESPACE,
            label_selector=f"{names.COMPONENT}={names.GATEWAY}",
        )
        self.controller: Controller[str] = Controller(name="node-agent", reconcile=self.reconcile)
        self.controller.watch(self.pods, lambda _pod: [KEY])
        self._applied: list[rules.RouteSpec] | None = None
        self._refused: dict[str, str] = {}

    async def reconcile(self, _key: str) -> Result:
        """Converge this node's routes and table to the running gateways (the routes it may make)."""
        wanted, refused = allowed_routes(
            wanted_routes(self.pods.store.list(), node_name=self._node_name),
            pools=self._pools,
            foreign=rules.foreign_routes(await self._runner.run(*rules.SHOW_ALL_ROUTES)),
        )
        if refused != self._refused:
            for route_text, reason in refused.items():
                log.warning("route to %s refused: %s", route_text, reason)
            self._refused = refused
        present = rules.parse_routes(await self._runner.run(*rules.SHOW_ROUTES))
        for argv in rules.route_commands(wanted=wanted, present=present):
            await self._runner.run(*argv)
        await self._runner.run(
            "nft",
            "-f",
            "-",
            input=rules.node_ruleset(
                table=TABLE, remote_cidrs=[r.destination for r in wanted], gateways=[r.via for r in wanted]
            ),
        )
        if wanted != self._applied:
            log.info("routes to peers: %s", ", ".join(f"{r.destination} via {r.via}" for r in wanted) or "none")
            self._applied = wanted
        return Result(requeue_after=RESYNC)
