"""Real local clusters for integration tests.

One session cluster is shared by every test that only adds objects to it (in namespaces of their own);
tests that stop or restart components restore them before they finish, and tests that take a whole
cluster down make their own. Names carry the pytest process id so that concurrent runs never collide;
``LIQO_TEST_KEEP=1`` keeps (and reuses, on the next run) the session cluster under a fixed name.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from liqo.api.crds import all_crds
from liqo.install.installer import wait_crds_established
from liqo.kube.client import KubeClient
from liqo.kube.resources import CRDS, NAMESPACES
from liqo.local.spec import ClusterSpec
from tests.integration.helpers import (
    KEEP,
    RUN_ID,
    LocalCluster,
    Offloaded,
    Site,
    install_liqo,
    offloaded_to,
    purge,
    start,
    unique,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    """The shared session cluster: 2 nodes, the default pod CIDR."""
    local = start(ClusterSpec(name=f"t{RUN_ID}-shared", nodes=2))
    yield local
    if not KEEP:
        purge(local)


@pytest.fixture(scope="session")
def peer_cluster() -> Iterator[LocalCluster]:
    """A second session cluster, with the same pod CIDR as the first (overlap is allowed)."""
    local = start(ClusterSpec(name=f"t{RUN_ID}-peer", nodes=1))
    yield local
    if not KEEP:
        purge(local)


@pytest.fixture
async def kube(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    async with cluster.client() as client:
        yield client


@pytest.fixture
async def namespace(kube: KubeClient) -> AsyncIterator[str]:
    """A fresh namespace in the session cluster, deleted afterwards."""
    name = unique("t")
    await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await kube.delete(NAMESPACES, name)


@pytest.fixture
async def crds(kube: KubeClient) -> None:
    """liqo's CRDs, applied and Established (an earlier test or run may have applied them already)."""
    for crd in all_crds():
        await kube.apply(CRDS, crd)
    await wait_crds_established(kube)


@pytest.fixture(scope="session")
def sites() -> Iterator[dict[str, Site]]:
    specs = {
        "rome": ClusterSpec(name=f"t{RUN_ID}-rome", nodes=1, node_cpu="4", node_memory="8Gi"),
        # A pod CIDR of its own: rome and milan route directly, rome and naples overlap (peering/test_networks.py).
        "milan": ClusterSpec(
            name=f"t{RUN_ID}-milan", nodes=2, node_cpu="8", node_memory="16Gi", pod_cidr="10.245.0.0/16"
        ),
        "naples": ClusterSpec(name=f"t{RUN_ID}-naples", nodes=1, node_cpu="4", node_memory="8Gi"),
    }
    started = {role: start(spec) for role, spec in specs.items()}
    yield {role: Site(local, install_liqo(local)) for role, local in started.items()}
    if not KEEP:
        for local in started.values():
            purge(local)


@pytest.fixture
async def rome(sites: dict[str, Site]) -> AsyncIterator[KubeClient]:
    async with sites["rome"].client() as client:
        yield client


@pytest.fixture
async def milan(sites: dict[str, Site]) -> AsyncIterator[KubeClient]:
    async with sites["milan"].client() as client:
        yield client


@pytest.fixture
async def naples(sites: dict[str, Site]) -> AsyncIterator[KubeClient]:
    async with sites["naples"].client() as client:
        yield client


@pytest.fixture
async def offloaded(sites: dict[str, Site]) -> AsyncIterator[Offloaded]:
    """rome peered with milan, a fresh namespace offloaded there with Remote; all undone and checked after."""
    async with offloaded_to(sites["rome"], sites["milan"], strategy="Remote") as made:
        yield made
