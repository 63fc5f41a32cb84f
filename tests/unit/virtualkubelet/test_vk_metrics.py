"""Offloaded pods per phase, what they request, and the reflection lag a write records."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import REGISTRY, CollectorRegistry

from liqo.kube.controller import Controller
from liqo.kube.informer import EventHandler, Informer
from liqo.kube.metrics import RuntimeMetrics
from liqo.virtualkubelet.metrics import offloaded_pods, used_resources, written

PHASES = ["Pending", "Running", "Succeeded", "Failed", "Unknown"]


def pod(name: str, phase: str | None, cpu: str | None = None) -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu}} if cpu else {}
    made: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "resources": resources}]},
    }
    if phase:
        made["status"] = {"phase": phase}
    return made


def test_offloaded_pods_are_counted_per_phase_a_pod_without_one_being_pending() -> None:
    pods = [pod("a", "Running"), pod("b", "Running"), pod("c", None), pod("d", "Failed")]
    assert list(offloaded_pods(pods, node="liqo-milan", provider="id-milan")) == [
        (("liqo-milan", "id-milan", "Failed"), 1.0),
        (("liqo-milan", "id-milan", "Pending"), 1.0),
        (("liqo-milan", "id-milan", "Running"), 2.0),
    ]


@given(st.lists(st.sampled_from([*PHASES, None])))
def test_every_pod_is_counted_once(phases: list[str | None]) -> None:
    pods = [pod(str(i), phase) for i, phase in enumerate(phases)]
    assert sum(count for _, count in offloaded_pods(pods, node="n", provider="p")) == len(pods)


def test_used_resources_are_the_requests_of_the_pods_not_finished() -> None:
    pods = [pod("a", "Running", "500m"), pod("b", None, "250m"), pod("c", "Succeeded", "4"), pod("d", "Running")]
    assert list(used_resources(pods, provider="id-milan")) == [
        (("id-milan", "cpu"), 0.75),
        (("id-milan", "pods"), 3.0),
    ]


class FakeInformer:
    """Just enough of an Informer for ``Controller.watch``: the test fires the events."""

    def __init__(self) -> None:
        self.handlers: list[EventHandler] = []

    def add_handler(self, handler: EventHandler) -> None:
        self.handlers.append(handler)


def lag_count(reflector: str) -> float:
    return REGISTRY.get_sample_value("liqo_reflection_lag_seconds_count", {"reflector": reflector}) or 0.0


async def test_a_write_records_the_age_of_the_change_it_follows_and_a_requeue_records_nothing() -> None:
    now = [10.0]
    informer = FakeInformer()
    lags: list[float | None] = []
    done = asyncio.Event()

    async def reconcile(key: str) -> None:
        now[0] += 0.25
        before = lag_count("test-kind")
        written("test-kind", controller, key)
        lags.append(lag_count("test-kind") - before)
        if len(lags) == 1:
            controller.queue.add(key)  # a plain requeue: nothing observed, nothing to measure
        else:
            done.set()

    controller: Controller[str] = Controller(
        name="lag", reconcile=reconcile, metrics=RuntimeMetrics(CollectorRegistry()), clock=lambda: now[0]
    )
    controller.watch(cast(Informer, informer), lambda obj: [obj["name"]])
    informer.handlers[0].on_add({"name": "a"})  # an observed change: its write is measured
    runner = asyncio.create_task(controller.run())
    async with asyncio.timeout(2):
        await done.wait()
    controller.queue.shut_down()
    await runner
    assert lags == [1.0, 0.0]
