"""The consumer's verdict on an offer, from the ForeignCluster's ``offerPolicy``.

``Auto`` (also what a ForeignCluster without an offer policy gets) takes every offer; ``Manual`` leaves it
to an operator; ``PriceLimit`` takes an offer only if every price in it is within ``maxPrices``. A price
for a resource without a maximum refuses the offer: the operator set limits, and a cost they did not
foresee is exactly what they wanted to be asked about. An offer past its expiry is refused whatever the
mode, since the provider no longer stands by it. The reason always says what decided, naming the resource
and both prices when a price is too high, because it is what ``kubectl get resourceoffers`` shows.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from liqo.api.offers import OfferPhase
from liqo.api.quantity import QuantityError, parse_quantity
from liqo.kube.timefmt import parse_time


def decide(
    offer_spec: Mapping[str, Any],
    offer_policy: Mapping[str, Any] | None,
    *,
    now: datetime.datetime | None = None,
) -> tuple[OfferPhase, str]:
    """The phase of an offer and why.

    Args:
        offer_spec: The ResourceOffer's ``spec``.
        offer_policy: The provider's ForeignCluster ``spec.offerPolicy`` (``None`` or empty: ``Auto``).
        now: The current time (timezone-aware), to refuse an expired offer; None skips the expiry check
            (an offer already accepted stays accepted until withdrawn: a provider slow to refresh it must
            not take the consumer's virtual node away).

    Returns:
        ``(phase, reason)``: ``Refused`` for an expired offer, then per mode ``Accepted`` (Auto),
        ``ManualActionRequired`` (Manual), ``Accepted`` or ``Refused`` (PriceLimit). An unknown mode refuses.
    """
    if now is not None and "expiry" in offer_spec:
        try:
            expiry = parse_time(str(offer_spec["expiry"]))
        except ValueError:
            return OfferPhase.REFUSED, f"the offer's expiry {offer_spec['expiry']!r} is not a timestamp"
        if expiry < now:
            return OfferPhase.REFUSED, f"the offer expired at {offer_spec['expiry']}"
    policy = offer_policy or {}
    mode = policy.get("mode") or "Auto"
    if mode == "Auto":
        return OfferPhase.ACCEPTED, "accepted automatically (offer policy Auto)"
    if mode == "Manual":
        return OfferPhase.MANUAL_ACTION_REQUIRED, "waiting for an operator to accept or refuse (offer policy Manual)"
    if mode == "PriceLimit":
        return _within_prices(offer_spec.get("prices") or {}, policy.get("maxPrices") or {})
    return OfferPhase.REFUSED, f"unknown offer policy mode {mode!r}"


def _within_prices(prices: Mapping[str, Any], max_prices: Mapping[str, Any]) -> tuple[OfferPhase, str]:
    for resource in sorted(prices):
        price = prices[resource]
        if resource not in max_prices:
            return OfferPhase.REFUSED, f"{resource} is priced at {price} but maxPrices sets no maximum for it"
        try:
            too_high = parse_quantity(price) > parse_quantity(max_prices[resource])
        except QuantityError as exc:
            return OfferPhase.REFUSED, f"{resource}: {exc}"
        if too_high:
            return OfferPhase.REFUSED, f"{resource} is priced at {price}, above the maximum of {max_prices[resource]}"
    return OfferPhase.ACCEPTED, "every price is within maxPrices (offer policy PriceLimit)"
