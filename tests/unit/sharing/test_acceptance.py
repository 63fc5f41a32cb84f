from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.kube.objects import Obj
from liqo.sharing.acceptance import decide

NOW = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)


def offer(*, prices: dict[str, str] | None = None, expiry: str | None = "2030-01-02T03:09:05Z") -> Obj:
    spec: Obj = {
        "providerClusterID": "id-milan",
        "providerClusterName": "milan",
        "resources": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
        "prices": prices or {},
        "timestamp": "2030-01-02T03:04:05Z",
    }
    if expiry is not None:
        spec["expiry"] = expiry
    return spec


@pytest.mark.parametrize("policy", [None, {}, {"mode": "Auto"}, {"mode": "Auto", "maxPrices": {"cpu": "0"}}])
def test_auto_and_no_policy_accept(policy: Obj | None) -> None:
    phase, reason = decide(offer(prices={"cpu": "5"}), policy, now=NOW)
    assert phase == "Accepted"
    assert "Auto" in reason


def test_manual_waits_for_an_operator() -> None:
    assert decide(offer(), {"mode": "Manual"}, now=NOW) == (
        "ManualActionRequired",
        "waiting for an operator to accept or refuse (offer policy Manual)",
    )


def test_price_limit_accepts_prices_within_the_maximum() -> None:
    prices = {"cpu": "50m", "nvidia.com/gpu": "2"}
    max_prices = {"cpu": "0.05", "nvidia.com/gpu": "3", "memory": "1m"}
    phase, _ = decide(offer(prices=prices), {"mode": "PriceLimit", "maxPrices": max_prices}, now=NOW)
    assert phase == "Accepted"


def test_price_limit_accepts_a_free_offer() -> None:
    assert decide(offer(), {"mode": "PriceLimit", "maxPrices": {}}, now=NOW)[0] == "Accepted"


def test_price_limit_refuses_naming_the_resource_and_both_prices() -> None:
    prices = {"cpu": "50m", "nvidia.com/gpu": "2500m"}
    policy = {"mode": "PriceLimit", "maxPrices": {"cpu": "1", "nvidia.com/gpu": "2"}}
    assert decide(offer(prices=prices), policy, now=NOW) == (
        "Refused",
        "nvidia.com/gpu is priced at 2500m, above the maximum of 2",
    )


def test_price_limit_refuses_a_price_it_sets_no_maximum_for() -> None:
    phase, reason = decide(offer(prices={"memory": "1m"}), {"mode": "PriceLimit", "maxPrices": {"cpu": "1"}}, now=NOW)
    assert phase == "Refused"
    assert "memory" in reason
    assert "no maximum" in reason


def test_price_limit_compares_quantities_not_strings() -> None:
    policy = {"mode": "PriceLimit", "maxPrices": {"cpu": 1}}
    assert decide(offer(prices={"cpu": "999m"}), policy, now=NOW)[0] == "Accepted"
    assert decide(offer(prices={"cpu": "1001m"}), policy, now=NOW)[0] == "Refused"


def test_a_malformed_price_refuses() -> None:
    phase, reason = decide(offer(prices={"cpu": "cheap"}), {"mode": "PriceLimit", "maxPrices": {"cpu": "1"}}, now=NOW)
    assert phase == "Refused"
    assert "cpu" in reason


@pytest.mark.parametrize("mode", ["Auto", "Manual", "PriceLimit"])
def test_an_expired_offer_is_refused_whatever_the_mode(mode: str) -> None:
    phase, reason = decide(offer(expiry="2030-01-02T03:04:04Z"), {"mode": mode, "maxPrices": {}}, now=NOW)
    assert phase == "Refused"
    assert "expired" in reason


def test_an_offer_expiring_right_now_still_stands() -> None:
    assert decide(offer(expiry="2030-01-02T03:04:05Z"), None, now=NOW)[0] == "Accepted"


def test_an_offer_without_expiry_does_not_expire() -> None:
    assert decide(offer(expiry=None), None, now=NOW)[0] == "Accepted"


def test_an_unreadable_expiry_refuses() -> None:
    phase, reason = decide(offer(expiry="tomorrow"), None, now=NOW)
    assert phase == "Refused"
    assert "tomorrow" in reason


def test_without_now_expiry_is_not_checked() -> None:
    # How an already accepted offer is re-decided: a late refresh must not take the virtual node away.
    assert decide(offer(expiry="2000-01-01T00:00:00Z"), None) == decide(offer(expiry="2999-01-01T00:00:00Z"), None)
    assert decide(offer(expiry="2000-01-01T00:00:00Z"), None)[0] == "Accepted"


def test_an_unknown_mode_refuses() -> None:
    assert decide(offer(), {"mode": "Lottery"}, now=NOW) == ("Refused", "unknown offer policy mode 'Lottery'")


MILLIS = st.integers(min_value=0, max_value=10**6)


@given(prices=st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]), MILLIS), headroom=st.integers(0, 10**6))
def test_prices_at_or_below_every_maximum_are_accepted(prices: dict[str, int], headroom: int) -> None:
    # Written differently on each side (whole units where possible against millis), compared as quantities.
    offered = {r: str(p // 1000) if p % 1000 == 0 else f"{p}m" for r, p in prices.items()}
    maximums = {r: f"{p + headroom}m" for r, p in prices.items()}
    assert decide(offer(prices=offered), {"mode": "PriceLimit", "maxPrices": maximums}, now=NOW)[0] == "Accepted"


@given(
    prices=st.dictionaries(st.sampled_from(["cpu", "memory", "pods"]), MILLIS, min_size=1),
    over=st.integers(1, 10**6),
    data=st.data(),
)
def test_one_price_above_its_maximum_refuses(prices: dict[str, int], over: int, data: st.DataObject) -> None:
    expensive = data.draw(st.sampled_from(sorted(prices)))
    maximums = {r: f"{p}m" for r, p in prices.items()}
    offered = {r: f"{p + (over if r == expensive else 0)}m" for r, p in prices.items()}
    phase, reason = decide(offer(prices=offered), {"mode": "PriceLimit", "maxPrices": maximums}, now=NOW)
    assert phase == "Refused"
    assert expensive in reason
