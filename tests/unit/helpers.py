"""The unit tests' own helpers (the ones the integration tests use too are in :mod:`tests.shared`)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any

from liqo.install import manifests
from liqo.kube.objects import Obj
from tests.shared import SAMPLE_VALUES


class Signal:
    """Wakes a waiting test whenever the code under test reports progress (no sleeping to synchronise)."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def fire(self) -> None:
        self._event.set()

    async def until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self._event.clear()
                await self._event.wait()


def install_manifests(*, webhook_client_config: Any = None, placement_policy: bool = True, **values: Any) -> list[Obj]:
    """What ``liqoctl install`` would apply on a real cluster with sample values (``values`` override fields)."""
    return manifests.manifests(
        dataclasses.replace(SAMPLE_VALUES, **values),
        webhook_client_config=webhook_client_config,
        placement_policy=placement_policy,
    )
