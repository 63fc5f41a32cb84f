"""Metrics and probes of real components: a peered pair offloads a Deployment, and every /metrics shows it.

Two clusters of this module's own (not the session's ``sites``): a consumer and a provider with liqo
installed, the manager and the virtual kubelet of each as supervised processes, each serving metrics on the
loopback port the installer chose for it.
"""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import pytest

from liqo.kube.resources import DEPLOYMENTS
from liqo.localclusters.spec import ClusterSpec
from tests.integration.helpers import (
    Site,
    deployment,
    offloaded_to,
    purge,
    running_pods,
    start_sites,
    unique,
)
from tests.integration.metrics import Samples, ports, scrape, value
from tests.shared import eventually


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Site, Site]]:
    """A consumer and a provider, made for this module and purged after it."""
    made = start_sites(
        {
            "consumer": ClusterSpec(name=unique("t-mhome"), nodes=1),
            "provider": ClusterSpec(name=unique("t-mprov"), nodes=1, node_cpu="4", node_memory="8Gi"),
        }
    )
    try:
        yield made["consumer"], made["provider"]
    finally:
        purge(made["consumer"].cluster, made["provider"].cluster)


async def test_offloaded_pods_show_in_the_metrics_of_both_sides_and_every_component_is_healthy_and_ready(
    pair: tuple[Site, Site],
) -> None:
    home, provider = pair
    home_ports, provider_ports = await ports(home), await ports(provider)
    async with aiohttp.ClientSession() as session:
        for port in (
            home_ports.metrics_port,
            home_ports.kubelet_metrics_port,
            provider_ports.metrics_port,
            provider_ports.kubelet_metrics_port,
        ):
            for probe in ("healthz", "readyz"):
                async with session.get(f"http://127.0.0.1:{port}/{probe}") as response:
                    assert response.status == 200, f"{probe} on {port}: {await response.text()}"

        async with offloaded_to(home, provider, strategy="Remote", prefix="metrics") as offloaded:
            async with home.client() as consumer:
                await consumer.create(DEPLOYMENTS, deployment("web", offloaded.namespace, replicas=2))
                await running_pods(consumer, offloaded.namespace, 2)

            kubelet_samples: Samples = {}

            async def two_running() -> bool:
                nonlocal kubelet_samples
                kubelet_samples = await scrape(session, home_ports.kubelet_metrics_port)
                running = value(
                    kubelet_samples,
                    "liqo_offloaded_pods",
                    node=offloaded.node,
                    provider=provider.cluster_id,
                    phase="Running",
                )
                return running == 2

            await eventually(two_running, timeout=30, message="2 Running pods on the virtual node in its metrics")
            assert (
                value(kubelet_samples, "liqo_consumer_used_resources", provider=provider.cluster_id, resource="pods")
                == 2
            )
            # 2 pods of 100m CPU each (tests.integration.helpers.deployment).
            used_cpu = value(
                kubelet_samples, "liqo_consumer_used_resources", provider=provider.cluster_id, resource="cpu"
            )
            assert used_cpu == pytest.approx(0.2)
            lag = value(kubelet_samples, "liqo_reflection_lag_seconds_count", reflector="pods")
            assert lag is not None
            assert lag >= 2, "each ShadowPod written records its lag"
            assert value(kubelet_samples, "liqo_leader", lease="liqo-virtual-kubelet") == 1
            reconciles = value(
                kubelet_samples, "liqo_controller_reconcile_duration_seconds_count", controller=f"pods {offloaded.node}"
            )
            assert reconciles is not None
            assert reconciles >= 2
            assert value(kubelet_samples, "liqo_workqueue_depth", controller=f"pods {offloaded.node}") is not None

            manager_samples = await scrape(session, home_ports.metrics_port)
            assert value(manager_samples, "liqo_leader", lease="liqo-manager") == 1
            established = value(manager_samples, "liqo_peers", condition="OutgoingPeering", status="Established")
            assert established == 1
            accepted = value(
                manager_samples, "liqo_consumer_accepted_resources", provider=provider.cluster_id, resource="cpu"
            )
            assert accepted is not None
            assert accepted > 0
            assert (
                value(
                    manager_samples, "liqo_controller_reconcile_duration_seconds_count", controller="offer-acceptance"
                )
                is not None
            )

            provided: Samples = {}

            async def provider_counts_them() -> bool:
                nonlocal provided
                provided = await scrape(session, provider_ports.metrics_port)
                pods = value(provided, "liqo_provider_used_resources", consumer=home.cluster_id, resource="pods")
                return pods == 2

            await eventually(provider_counts_them, timeout=30, message="the provider's ledger in its metrics")
            offered = value(provided, "liqo_provider_offered_resources", consumer=home.cluster_id, resource="cpu")
            budget = value(provided, "liqo_provider_accepted_resources", consumer=home.cluster_id, resource="cpu")
            assert offered is not None
            assert offered > 0
            assert budget == offered
            assert value(provided, "liqo_provider_waiting_pods", consumer=home.cluster_id) == 0
            assert value(provided, "liqo_peers", condition="IncomingPeering", status="Established") == 1
