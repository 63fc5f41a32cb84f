"""A leader-election candidate process for tests: ``python elector.py KUBECONFIG NAMESPACE LEASE IDENTITY``.

Prints ``READY <identity>`` once campaigning and ``LEADING <identity>`` when it holds the lease; SIGTERM
cancels the campaign (which releases the lease).
"""

from __future__ import annotations

import asyncio
import signal
import sys

from liqo.kube.client import KubeClient
from liqo.kube.leaderelection import LeaderElector

LEASE_DURATION = 2.0
RENEW_DEADLINE = 1.5
RETRY_PERIOD = 0.2


async def campaign(kubeconfig: str, namespace: str, lease: str, identity: str) -> None:
    async with KubeClient.from_kubeconfig(kubeconfig) as client:
        elector = LeaderElector(
            client=client,
            namespace=namespace,
            name=lease,
            identity=identity,
            lease_duration=LEASE_DURATION,
            renew_deadline=RENEW_DEADLINE,
            retry_period=RETRY_PERIOD,
        )

        async def leading() -> None:
            print(f"LEADING {identity}", flush=True)
            await asyncio.Event().wait()

        task = asyncio.create_task(elector.run(leading))
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        print(f"READY {identity}", flush=True)
        try:
            await task
        except asyncio.CancelledError:
            print(f"RELEASED {identity}", flush=True)


if __name__ == "__main__":
    asyncio.run(campaign(*sys.argv[1:5]))
