"""What each consumer's pods hold of this provider, as metric samples read from the ShadowPod ledger.

The ledger (:class:`~liqo.offloading.budget.Ledger`) is the provider's own accounting of every consumer's
budget, kept by the ShadowPod controller in the leader: reading it at scrape time costs the hot path nothing
and gives exactly what admission decides with.
"""

from __future__ import annotations

from collections.abc import Iterator

from liqo.kube.metrics import Sample
from liqo.offloading.budget import Ledger


def used_resources(ledger: Ledger) -> Iterator[Sample]:
    """``((consumer, resource), amount)``: the effective requests of the consumer's pods here, ``pods`` included."""
    for consumer in sorted(ledger.consumers()):
        for resource, amount in sorted(ledger.in_use(consumer).requests.items()):
            yield (consumer, resource), float(amount)


def waiting_pods(ledger: Ledger) -> Iterator[Sample]:
    """``((consumer,), count)``: the consumer's ShadowPods waiting for room in its budget (or for a budget)."""
    for consumer in sorted(ledger.consumers()):
        yield (consumer,), float(len(ledger.waiting(consumer)))
