"""What each consumer's pods hold here and how many wait, read from the ShadowPod ledger."""

from __future__ import annotations

from decimal import Decimal

from liqo.offloading.budget import Budget, Ledger, Usage
from liqo.offloading.metrics import used_resources, waiting_pods


def usage(cpu: str) -> Usage:
    return Usage(requests={"cpu": Decimal(cpu), "pods": Decimal(1)})


def test_used_resources_and_waiting_pods_follow_the_ledger() -> None:
    ledger = Ledger()
    budget = Budget(resources={"cpu": Decimal(1), "pods": Decimal(10)})
    assert ledger.admit("t1/a", consumer="rome", uid="1", usage=usage("0.5"), budget=budget) is None
    assert ledger.admit("t1/b", consumer="rome", uid="2", usage=usage("0.25"), budget=budget) is None
    assert ledger.admit("t1/c", consumer="rome", uid="3", usage=usage("0.5"), budget=budget) is not None
    ledger.hold("t2/d", consumer="naples", uid="4", usage=usage("2"))

    assert list(used_resources(ledger)) == [
        (("naples", "cpu"), 2.0),
        (("naples", "pods"), 1.0),
        (("rome", "cpu"), 0.75),
        (("rome", "pods"), 2.0),
    ]
    assert list(waiting_pods(ledger)) == [(("naples",), 0.0), (("rome",), 1.0)]

    ledger.release("t1/a")
    ledger.release("t1/b")
    ledger.stop_waiting("t1/c")
    assert [labels for labels, _ in used_resources(ledger)] == [("naples", "cpu"), ("naples", "pods")]
    assert list(waiting_pods(ledger)) == [(("naples",), 0.0)]
