"""The state of every peering, as metric samples read from the ForeignCluster cache (pure).

The conditions are already the summary (:mod:`liqo.peering.status` derives them from every controller's
work), so the metric counts peers per condition and status rather than re-deriving anything: an alert on
``liqo_peers{condition="OutgoingPeering", status!="Established"}`` says what ``liqoctl status`` would.
Peers are counted, not listed, to keep one series per condition and status whatever the number of peers;
``liqo_peer_info`` maps the cluster IDs other metrics carry to the names people know.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from liqo.api.foreignclusters import cluster_id
from liqo.kube.metrics import Sample


def peers_by_condition(foreign_clusters: Iterable[Mapping[str, Any]]) -> Iterator[Sample]:
    """``((condition type, status), peers)`` for every pair that at least one ForeignCluster has."""
    counts = Counter(
        (str(condition.get("type")), str(condition.get("status")))
        for foreign_cluster in foreign_clusters
        for condition in {
            # One vote per peer and type, should a hand-edited status repeat a type.
            c.get("type"): c
            for c in (foreign_cluster.get("status") or {}).get("conditions") or []
            if isinstance(c, Mapping)
        }.values()
    )
    for (kind, status), count in sorted(counts.items()):
        yield (kind, status), float(count)


def peer_info(foreign_clusters: Iterable[Mapping[str, Any]]) -> Iterator[Sample]:
    """``((cluster ID, ForeignCluster name), 1)`` for every peer."""
    for foreign_cluster in foreign_clusters:
        if peer_id := cluster_id(foreign_cluster):
            yield (peer_id, str(foreign_cluster["metadata"]["name"])), 1.0
