"""Pod requests and limits by the scheduler's rule (the aggregation itself is tested in sharing/test_capacity)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from liqo.api.podrequests import pod_limits, pod_requests
from liqo.kube.objects import Obj


def pod(*containers: Obj, init: list[Obj] | None = None, **spec: Any) -> Obj:
    return {"spec": {"containers": list(containers), "initContainers": init or []} | spec}


def container(**resources: dict[str, str]) -> Obj:
    return {"name": "c", "image": "x", "resources": resources}


def test_a_limit_without_a_request_is_also_the_request() -> None:
    both = pod(container(limits={"cpu": "2", "memory": "1Gi"}, requests={"cpu": "500m"}))
    assert pod_requests(both) == {"cpu": Decimal("0.5"), "memory": Decimal(2**30)}


def test_pod_level_limits_default_pod_level_requests_too() -> None:
    assert pod_requests(pod(container(), resources={"limits": {"cpu": "3"}})) == {"cpu": Decimal(3)}


def test_limits_follow_the_same_rule_as_requests() -> None:
    limited = pod(
        container(limits={"cpu": "1"}),
        container(limits={"cpu": "500m", "memory": "1Gi"}),
        init=[{"name": "i", "resources": {"limits": {"cpu": "2"}}}],
        overhead={"cpu": "100m"},
    )
    assert pod_limits(limited) == {"cpu": Decimal("2.1"), "memory": Decimal(2**30)}


def test_requests_alone_declare_no_limits() -> None:
    assert pod_limits(pod(container(requests={"cpu": "1"}))) == {}


AMOUNTS = st.dictionaries(st.sampled_from(["cpu", "memory"]), st.integers(0, 4000).map(str), max_size=2)


@given(containers=st.lists(st.tuples(AMOUNTS, AMOUNTS), min_size=1, max_size=3))
def test_requests_are_at_least_the_limits_that_default_them(
    containers: list[tuple[dict[str, str], dict[str, str]]],
) -> None:
    # Where a container has a limit and no request, the request is the limit; never less.
    built = pod(*(container(requests=asked, limits=capped) for asked, capped in containers))
    requests = pod_requests(built)
    for own_requests, own_limits in containers:
        for resource, amount in own_limits.items():
            if resource not in own_requests:
                assert requests[resource] >= Decimal(amount)
