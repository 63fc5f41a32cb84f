"""The node controller's loop: it must stop when cancelled, whatever else happens in the same instant."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from liqo.kube.client import KubeClient
from liqo.kube.events import EventRecorder
from liqo.virtualkubelet.node import NodeController


async def test_a_change_racing_the_cancel_does_not_keep_the_node_running() -> None:
    # A VirtualNode deletion both signals a change and stops the node. With asyncio.wait_for (3.11) the
    # change could swallow the cancel and the controller would renew a deleted node's lease forever.
    node = NodeController(
        client=cast(KubeClient, object()),
        virtual_node=lambda: None,
        provider=lambda: None,
        provider_id="m",
        home_cluster_id="r",
        address="127.0.0.1",
        port=1,
        holder="test",
        events=cast(EventRecorder, object()),
        ownership_changed=lambda: None,
    )
    for _ in range(20):
        task: asyncio.Task[Any] = asyncio.create_task(node.run())
        await asyncio.sleep(0)  # let it reach its wait
        node.changed()
        task.cancel()
        async with asyncio.timeout(1):
            await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
