"""What the consumer side's peering loops share: one value built once, and the base that unpacks it.

The loop that runs the handshakes (:mod:`liqo.peering.outgoing`) and the one that tells their outcome in each
ForeignCluster's status (:mod:`liqo.peering.status`) act on the same peers through the same caches, clients to
each provider and record of what the last handshakes observed. Handing them one :class:`ConsumerSide` keeps
the two from drifting apart (a loop given another cache or another set of peer clients would show a status
that is not what the handshakes saw).
"""

from __future__ import annotations

from dataclasses import dataclass

from liqo.api.identity import ClusterIdentity
from liqo.api.networks import ClusterNetwork
from liqo.api.peers import PeerClients
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.events import EventRecorder
from liqo.peering.caches import PeeringCaches
from liqo.peering.observations import Observations


@dataclass(frozen=True, kw_only=True)
class ConsumerSide:
    """This cluster as a consumer.

    Its API, identity, network and caches, its providers' clients, what the handshakes observed, where Events go.
    """

    client: KubeClient
    caches: PeeringCaches
    local: ClusterIdentity
    network: ClusterNetwork
    peers: PeerClients
    observations: Observations
    events: EventRecorder


class ConsumerLoop(Component):
    """A consumer-side peering loop: the shared parts at hand, the caches under the names it watches."""

    def __init__(self, side: ConsumerSide) -> None:
        self._client = side.client
        self._local = side.local
        self._network = side.network
        self._peers = side.peers
        self._observations = side.observations
        self._events = side.events
        self.caches = side.caches
        self.foreign_clusters = side.caches.foreign_clusters
        self.requests = side.caches.requests
        self.offers = side.caches.offers
        self.virtual_nodes = side.caches.virtual_nodes
        self.networks = side.caches.networks
