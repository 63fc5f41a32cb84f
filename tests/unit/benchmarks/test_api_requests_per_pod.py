from __future__ import annotations

from benchmarks.apirequests import delta, median_counts, per_pod, request_counts, table, workload_writes, writes


def sample(
    *,
    resource: str,
    verb: str,
    value: str,
    subresource: str = "",
    group: str = "",
    code: str = "200",
    scope: str = "resource",
) -> str:
    labels = (
        f'code="{code}",component="apiserver",dry_run="",group="{group}",resource="{resource}",scope="{scope}",'
        f'subresource="{subresource}",verb="{verb}",version="v1"'
    )
    return f"apiserver_request_total{{{labels}}} {value}"


METRICS = "\n".join(
    [
        "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
        "# TYPE apiserver_request_total counter",
        sample(resource="pods", verb="POST", value="10", code="201"),
        sample(resource="pods", verb="POST", value="2", code="409"),
        sample(resource="pods", subresource="status", verb="PATCH", value="7"),
        sample(resource="shadowpods", group="offloading.liqo.io", verb="APPLY", value="3e+00"),
        sample(resource="", verb="GET", value="99"),
        sample(resource="pods", verb="WATCH", value="1", code="0"),
        'apiserver_request_duration_seconds_count{resource="pods",verb="POST"} 12',
    ]
)


def test_requests_are_counted_by_resource_and_verb_across_codes() -> None:
    assert request_counts(METRICS) == {
        ("pods", "create"): 12,
        ("pods/status", "patch"): 7,
        ("shadowpods", "apply"): 3,
        ("pods", "watch"): 1,
    }


def test_requests_of_every_scope_are_summed() -> None:
    metrics = "\n".join(
        [
            sample(resource="rolebindings", verb="LIST", value="2", scope="namespace"),
            sample(resource="rolebindings", verb="LIST", value="1", scope="cluster"),
        ]
    )
    assert request_counts(metrics) == {("rolebindings", "list"): 3}


def test_a_run_costs_the_difference_per_pod_and_repeats_take_the_median() -> None:
    before = {("pods", "create"): 12.0, ("pods", "watch"): 1.0}
    after = {("pods", "create"): 32.0, ("pods", "watch"): 1.0, ("pods/status", "patch"): 40.0}
    run = per_pod(delta(before, after), pods=20)
    assert run == {("pods", "create"): 1.0, ("pods/status", "patch"): 2.0}
    assert writes(run | {("pods", "list"): 5.0}) == 3.0
    other = {("pods", "create"): 3.0}
    third = {("pods", "create"): 2.0, ("pods/status", "patch"): 1.0}
    assert median_counts([run, other, third]) == {("pods", "create"): 2.0, ("pods/status", "patch"): 1.0}


def test_the_table_puts_the_costliest_first_and_drops_what_rounds_to_nothing() -> None:
    rows = table(
        {
            "offloaded": {("pods", "create"): 1.0, ("pods/status", "patch"): 3.0, ("leases", "update"): 0.001},
            "direct": {("pods", "create"): 1.0},
        }
    )
    assert rows == [["pods/status", "patch", "3.00", "0.00"], ["pods", "create", "1.00", "1.00"]]


def test_a_cluster_at_rest_writes_only_leases_and_node_heartbeats() -> None:
    at_rest = {("leases", "update"): 40.0, ("nodes/status", "patch"): 12.0, ("pods", "list"): 3.0}
    assert workload_writes(at_rest) == 0
    draining = at_rest | {("pods", "delete"): 5000.0, ("events", "create"): 2.0}
    assert workload_writes(draining) == 5002
    assert writes(draining) == 5054
