"""Storage offers as the policy, the offer and the virtual node say them: one reading, one writing."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api.crds.schema import DNS_SUBDOMAIN_PATTERN
from liqo.api.quantity import QuantityError, round_down
from liqo.api.storage import ACCESS_MODES, DEFAULT_ACCESS_MODES, ClassOffer, class_offers, storage_items, storage_labels

class_names = st.from_regex(DNS_SUBDOMAIN_PATTERN, fullmatch=True).filter(lambda name: len(name) <= 63)
offers = st.lists(
    st.builds(
        ClassOffer,
        name=class_names,
        capacity=st.integers(0, 2**50).map(lambda n: round_down(Decimal(n), resource="storage")),
        access_modes=st.lists(st.sampled_from(ACCESS_MODES), min_size=1, max_size=4, unique=True).map(tuple),
    ),
    max_size=5,
    unique_by=lambda offer: offer.name,
)


@given(offers)
def test_an_offer_written_is_read_back_the_same_in_name_order(given_offers: list[ClassOffer]) -> None:
    assert class_offers(storage_items(given_offers)) == tuple(sorted(given_offers, key=lambda offer: offer.name))


def test_a_class_offered_without_access_modes_allows_one_node_at_a_time() -> None:
    assert class_offers([{"class": "local", "capacity": "10Gi"}]) == (
        ClassOffer(name="local", capacity=Decimal(10 * 2**30), access_modes=DEFAULT_ACCESS_MODES),
    )


@pytest.mark.parametrize(
    ("item", "error"),
    [
        ({"class": "local"}, QuantityError),
        ({"class": "local", "capacity": True}, QuantityError),
        ({"class": "local", "capacity": "ten"}, QuantityError),
        ({"capacity": "1Gi"}, ValueError),
        ({"class": "local", "capacity": "1Gi", "accessModes": ["ReadWriteSometimes"]}, ValueError),
    ],
)
def test_an_item_half_understood_is_an_error_never_a_budget(item: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        class_offers([item])


def test_each_class_labels_the_virtual_node_and_what_cannot_be_a_label_is_left_out() -> None:
    items = [{"class": "local", "capacity": "1Gi"}, {"class": "x" * 64, "capacity": "1Gi"}, "junk", {"class": 3}]
    assert storage_labels(items) == {"storage.liqo.io/local": "true"}  # type: ignore[arg-type]
    assert storage_labels(None) == {}
