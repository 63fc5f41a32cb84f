"""Offered and accepted resources, both directions, from the offer and VirtualNode caches."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.quantity import format_quantity
from liqo.sharing.metrics import offers_made, offers_received, resource_samples, virtual_node_resources

LOCAL = "id-rome"


def offer(name: str, namespace: str, phase: str | None = None, **resources: Any) -> dict[str, Any]:
    made: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace}, "spec": {"resources": resources}}
    if phase:
        made["status"] = {"phase": phase}
    return made


OFFERS = [
    offer(LOCAL, names.tenant_namespace("id-milan"), "Accepted", cpu="4", memory="8Gi", pods=110),
    offer(LOCAL, names.tenant_namespace("id-naples"), None, cpu="500m"),
    offer("id-turin", names.tenant_namespace("id-turin"), "Accepted", cpu="2"),  # received from turin
    offer(LOCAL, "default", None, cpu="1"),  # not in a tenant namespace: not an offer of ours
]


def test_offers_made_are_this_clusters_own_in_base_units() -> None:
    assert sorted(offers_made(OFFERS, local_id=LOCAL)) == [
        (("id-milan", "cpu"), 4.0),
        (("id-milan", "memory"), float(8 * 2**30)),
        (("id-milan", "pods"), 110.0),
        (("id-naples", "cpu"), 0.5),
    ]


def test_only_accepted_offers_count_as_accepted() -> None:
    assert sorted(offers_made(OFFERS, local_id=LOCAL, accepted_only=True)) == [
        (("id-milan", "cpu"), 4.0),
        (("id-milan", "memory"), float(8 * 2**30)),
        (("id-milan", "pods"), 110.0),
    ]


def test_offers_received_and_virtual_nodes_are_per_provider() -> None:
    received = [offer("id-turin", names.tenant_namespace("id-turin"), cpu="2", memory="1G")]
    assert sorted(offers_received(received)) == [(("id-turin", "cpu"), 2.0), (("id-turin", "memory"), 1e9)]
    node = {"metadata": {"name": "liqo-turin"}, "spec": {"clusterID": "id-turin", "resources": {"cpu": "1500m"}}}
    assert list(virtual_node_resources([node])) == [(("id-turin", "cpu"), 1.5)]


def test_an_unreadable_quantity_is_left_out_not_guessed() -> None:
    assert list(resource_samples("p", {"cpu": "lots", "pods": "3"})) == [(("p", "pods"), 3.0)]


@given(st.dictionaries(st.sampled_from(["cpu", "memory", "pods", "nvidia.com/gpu"]), st.integers(0, 10**12)))
def test_every_written_quantity_reads_back_as_its_value(amounts: dict[str, int]) -> None:
    milli = {
        resource: Decimal(amount) / 1000 if resource == "cpu" else Decimal(amount)
        for resource, amount in amounts.items()
    }
    written = {resource: format_quantity(amount, resource=resource) for resource, amount in milli.items()}
    assert dict(resource_samples("p", written)) == {("p", r): float(a) for r, a in milli.items()}
