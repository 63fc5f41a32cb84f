"""API requests per pod, from an API server's ``/metrics``: parsing, differences, medians, the table.

Why ``apiserver_request_total``: the API server counts every request it answered, by verb, resource and
subresource, whoever sent it (controllers, scheduler, KWOK, liqo), so its difference over a rollout divided
by the rollout's pods is what one pod costs each cluster's API server — the write amplification that
offloading adds is read there, not guessed from our code. Pure (text in, numbers out), so it is
unit-tested without a cluster.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence

METRIC = "apiserver_request_total"
VERBS = {
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "APPLY": "apply",
    "DELETE": "delete",
    "DELETECOLLECTION": "deletecollection",
    "GET": "get",
    "LIST": "list",
    "WATCH": "watch",
    "WATCHLIST": "watch",
    "CONNECT": "connect",
}
"""The metric's verb labels, as the API verbs people know them by (server-side apply is ``APPLY``)."""

Key = tuple[str, str]
"""(resource, verb): ``("pods/status", "patch")``."""
Counts = dict[Key, float]

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def request_counts(metrics: str) -> Counts:
    """Requests answered so far by (resource[/subresource], verb), summed over codes, groups, versions and scopes.

    Requests without a resource (``/healthz``, ``/metrics``, discovery) are left out: they are no pod's.
    """
    counts: Counts = {}
    for line in metrics.splitlines():
        if not line.startswith(METRIC + "{"):
            continue
        labels_text, _, value = line[len(METRIC) + 1 :].rpartition("} ")
        labels = dict(_LABEL.findall(labels_text))
        resource = labels.get("resource", "")
        if not resource:
            continue
        if labels.get("subresource"):
            resource += "/" + labels["subresource"]
        verb = labels.get("verb", "")
        key = (resource, VERBS.get(verb, verb.lower()))
        counts[key] = counts.get(key, 0.0) + float(value.split()[0])
    return counts


def delta(before: Mapping[Key, float], after: Mapping[Key, float]) -> Counts:
    """The requests answered between two readings (keys that did not move are left out)."""
    moved = {key: value - before.get(key, 0.0) for key, value in after.items()}
    return {key: value for key, value in moved.items() if value > 0}


def per_pod(counts: Mapping[Key, float], *, pods: int) -> Counts:
    """Requests per pod of a rollout of ``pods`` pods."""
    return {key: value / pods for key, value in counts.items()}


def median_counts(runs: Sequence[Mapping[Key, float]]) -> Counts:
    """The median of each key over runs (a key absent from a run counts 0 there)."""
    keys = {key for run in runs for key in run}
    return {key: statistics.median(run.get(key, 0.0) for run in runs) for key in keys}


def table(columns: Mapping[str, Mapping[Key, float]], *, at_least: float = 0.01) -> list[list[str]]:
    """Rows ``resource, verb, value per column...``, largest first; rows under ``at_least`` everywhere dropped.

    ``columns`` maps a column title (``"offloaded: rome"``) to its requests per pod.
    """
    keys = {key for values in columns.values() for key in values}
    shown = [key for key in keys if max(values.get(key, 0.0) for values in columns.values()) >= at_least]
    shown.sort(key=lambda key: (-sum(values.get(key, 0.0) for values in columns.values()), key))
    return [[resource, verb, *(f"{values.get((resource, verb), 0.0):.2f}" for values in columns.values())]
            for resource, verb in shown]  # fmt: skip


READS = frozenset({"get", "list", "watch", "connect"})
AT_REST = frozenset({"leases", "nodes", "nodes/status"})
"""What a cluster writes with nothing going on: leader and node leases, node heartbeats."""


def writes(counts: Mapping[Key, float]) -> float:
    """The total of the requests that change something (create, update, patch, apply, delete)."""
    return sum(value for (_, verb), value in counts.items() if verb not in READS)


def workload_writes(counts: Mapping[Key, float]) -> float:
    """The writes but a cluster's writes at rest (:data:`AT_REST`): what work still under way makes (pure).

    Unchanged over a few seconds, the cluster has settled: a clean-up's last deletions are done, including
    KWOK's, whose queue of stage changes drains long after the pods are gone (at 10 000 pods, ~10 000
    deletions answered 404 over the next minutes, which would be counted against the next run).
    """
    return sum(value for (resource, verb), value in counts.items() if verb not in READS and resource not in AT_REST)
