"""run_components: every loop runs, every component is closed whatever happens, a cache that never syncs fails."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component, run_components
from liqo.kube.controller import Controller
from liqo.kube.metrics import CacheGauge
from liqo.kube.resources import PODS
from tests.unit.fakeapi import FakeApi


class Counting(Component):
    def __init__(self) -> None:
        self.reconciled = asyncio.Event()
        self.closed = False
        self.loop: Controller[str] = Controller(name="counting", reconcile=self.reconcile)
        self.loop.queue.add("one")

    async def reconcile(self, key: str) -> None:
        self.reconciled.set()

    @property
    def controllers(self) -> list[Controller[Any]]:
        return [self.loop]

    async def close(self) -> None:
        self.closed = True


async def test_loops_run_once_the_caches_synced_and_every_component_is_closed_on_the_way_out() -> None:
    api = FakeApi()
    informers = SharedInformers(cast(KubeClient, api))
    informers.informer(PODS)
    first, second = Counting(), Counting()
    task = asyncio.create_task(run_components([first, second, Component()], informers=informers))
    await asyncio.wait_for(asyncio.gather(first.reconciled.wait(), second.reconciled.wait()), 5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert first.closed
    assert second.closed


async def test_caches_that_never_sync_are_an_error_and_still_close_everything() -> None:
    informers = SharedInformers(cast(KubeClient, FakeApi(listing=False)))
    informers.informer(PODS)
    component = Counting()
    with pytest.raises(ExceptionGroup) as failed:
        await run_components([component], informers=informers, sync_timeout=0.05)
    assert failed.group_contains(RuntimeError, match="did not sync")
    assert component.closed
    assert not component.reconciled.is_set()


class Gauged(Counting):
    @property
    def gauges(self) -> list[CacheGauge]:
        return [CacheGauge("liqo_test_items", "help", ("kind",), lambda: [(("one",), 1.0)])]


async def test_a_components_gauges_are_served_while_its_loops_run() -> None:
    registry = CollectorRegistry()
    informers = SharedInformers(cast(KubeClient, FakeApi()))
    informers.informer(PODS)
    component = Gauged()
    task = asyncio.create_task(run_components([component], informers=informers, registry=registry))
    await asyncio.wait_for(component.reconciled.wait(), 5)
    assert registry.get_sample_value("liqo_test_items", {"kind": "one"}) == 1
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert registry.get_sample_value("liqo_test_items", {"kind": "one"}) is None
