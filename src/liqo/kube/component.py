"""What a process runs: components, each some control loops over shared informers, and what to release.

The manager runs a dozen controllers (peering, sharing, replication, offloading...) on one set of shared
informers, while it leads; the virtual kubelet's reflection manager runs its reflectors the same way. Each
capability hands its loops over as a :class:`Component`, so that ``liqo.apps`` only wires them: it lists
the components and calls :func:`run_components`, which starts the informers, waits for their first lists,
runs every loop, and closes every component on the way out (remote informers, clients), whatever happens.
A component's gauges (:class:`~liqo.kube.metrics.CacheGauge`, read from its caches at scrape time) are
served for as long as its loops run.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from liqo.kube.cache import SharedInformers
from liqo.kube.controller import Controller

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

    from liqo.kube.metrics import CacheGauge

log = logging.getLogger(__name__)


class Component:
    """Control loops run together, their gauges, and what to release when they stop; all empty by default."""

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The component's control loops."""
        return []

    @property
    def gauges(self) -> list[CacheGauge]:
        """What the component's caches say, as metrics."""
        return []

    async def close(self) -> None:
        """Release what the component holds beyond its loops (remote informers, clients)."""


async def run_components(
    components: Sequence[Component],
    *,
    informers: SharedInformers,
    sync_timeout: float = 60.0,
    registry: CollectorRegistry | None = None,
) -> None:
    """Run the shared informers and every component's loops until cancelled; close every component after.

    The components' gauges are in ``registry`` (by default the process's) meanwhile.

    Raises:
        RuntimeError: the informers did not complete their first list within ``sync_timeout`` seconds.
    """
    # Here, not at the top, as in liqo.kube.controller: liqoctl imports this module and runs no component.
    from prometheus_client import REGISTRY  # noqa: PLC0415

    from liqo.kube.metrics import CacheCollector, registered  # noqa: PLC0415

    controllers = [controller for component in components for controller in component.controllers]
    gauges = CacheCollector([gauge for component in components for gauge in component.gauges])
    try:
        with registered(gauges, registry or REGISTRY):
            async with asyncio.TaskGroup() as group:
                group.create_task(informers.run())
                if not await informers.wait_synced(sync_timeout):
                    raise RuntimeError(f"caches did not sync within {sync_timeout:.0f} s")
                log.info("caches synced; running %d controllers", len(controllers))
                for controller in controllers:
                    group.create_task(controller.run(), name=f"controller {controller.name}")
    finally:
        for component in components:
            await component.close()
