"""Real local clusters for integration tests.

Shared clusters (the families of :data:`tests.lanes.SHARED`: ``naples``, ``sites``, ``cluster``, ``peer_cluster``) serve
every test that only adds objects to them (in namespaces of their own); tests that stop or restart
components restore them before they finish, and tests that take a whole cluster down make their own.
A family starts when the first module of a lane (an xdist worker, or the one serial run) needs it, and is
purged as soon as the lane starts a module that does not: :mod:`tests.lanes` hands out every module of a
family before any module of the next, so a lane never needs a family again once it moved on, and no idle
cluster waits for the end of the run (on 2 cores, every idle cluster costs the others about 5% of a core).
Should a family be needed again (a run given modules in another order), it starts again: slower, not wrong.

Names carry the pytest process id so that concurrent runs never collide; ``LIQO_TEST_KEEP=1`` keeps the
shared clusters (under fixed names, reused by the next run) instead of purging them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from liqo.api.crds import all_crds
from liqo.install.installer import wait_crds_established
from liqo.kube.client import KubeClient
from liqo.kube.resources import CRDS, NAMESPACES
from liqo.localclusters.spec import ClusterSpec
from tests.integration.helpers import (
    KEEP,
    RUN_ID,
    LocalCluster,
    Offloaded,
    Site,
    offloaded_to,
    purge,
    start,
    start_sites,
    unique,
    unpeered,
)
from tests.lanes import SHARED


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.cluster)


class Families:
    """The lane's shared clusters: each started on first use, purged on :meth:`release` (unless kept)."""

    def __init__(self, *, keep: bool) -> None:
        self.keep = keep
        self.held: dict[str, tuple[Any, Callable[[], None]]] = {}

    def get(self, name: str, *, start: Callable[[], Any], purge: Callable[[Any], None]) -> Any:
        if name not in self.held:
            self.add(name, start(), purge=purge)
        return self.value(name)

    def holds(self, name: str) -> bool:
        return name in self.held

    def value(self, name: str) -> Any:
        return self.held[name][0]

    def add(self, name: str, value: Any, *, purge: Callable[[Any], None]) -> None:
        """Hold ``value``, started by the caller, as family ``name``."""
        self.held[name] = (value, lambda: purge(value))

    def release(self, *, keep: set[str]) -> None:
        """Purge every family held but those in ``keep``."""
        for name in [n for n in self.held if n not in keep]:
            _, purge_family = self.held.pop(name)
            if not self.keep:
                purge_family()


@pytest.fixture(scope="session")
def families() -> Iterator[Families]:
    held = Families(keep=KEEP)
    yield held
    held.release(keep=set())


@pytest.fixture(scope="module", autouse=True)
def _release_families(request: pytest.FixtureRequest, families: Families) -> None:
    """At each module's start, purge the families it does not use (see the module docstring)."""
    families.release(keep=_module_fixtures(request) & set(SHARED))


def _module_fixtures(request: pytest.FixtureRequest) -> set[str]:
    """The fixtures any test of the requesting module uses."""
    module = request.node.path
    return {name for item in request.session.items if item.path == module for name in getattr(item, "fixturenames", ())}


@pytest.fixture(scope="module")
def cluster(families: Families) -> LocalCluster:
    """The shared cluster: 2 nodes, the default pod CIDR, no liqo."""
    local: LocalCluster = families.get(
        "cluster", start=lambda: start(ClusterSpec(name=f"t{RUN_ID}-shared", nodes=2)), purge=purge
    )
    return local


@pytest.fixture(scope="module")
def peer_cluster(families: Families) -> LocalCluster:
    """A second shared cluster, with the same pod CIDR as the first (overlap is allowed)."""
    local: LocalCluster = families.get(
        "peer_cluster", start=lambda: start(ClusterSpec(name=f"t{RUN_ID}-peer", nodes=1)), purge=purge
    )
    return local


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


@pytest.fixture(scope="module")
def sites(request: pytest.FixtureRequest, families: Families) -> dict[str, Site]:
    """rome and milan, liqo installed on each, not peered; and naples in a module whose tests use ``naples``.

    The families a module lacks start together (a start mostly waits, so three take little more than one).
    """
    wanted = ["sites", *(["naples"] if "naples" in _module_fixtures(request) else [])]
    missing = [family for family in wanted if not families.holds(family)]
    if missing:
        started = start_sites({role: SITE_SPECS[role] for family in missing for role in SITE_FAMILIES[family]})
        for family in missing:
            families.add(family, {role: started[role] for role in SITE_FAMILIES[family]}, purge=_purge_sites)
    return {role: site for family in wanted for role, site in families.value(family).items()}


SITE_FAMILIES = {"sites": ("rome", "milan"), "naples": ("naples",)}
SITE_SPECS = {
    "rome": ClusterSpec(name=f"t{RUN_ID}-rome", nodes=1, node_cpu="4", node_memory="8Gi"),
    # A pod CIDR of its own: rome and milan route directly, rome and naples overlap (peering/test_networks.py).
    "milan": ClusterSpec(name=f"t{RUN_ID}-milan", nodes=2, node_cpu="8", node_memory="16Gi", pod_cidr="10.245.0.0/16"),
    "naples": ClusterSpec(name=f"t{RUN_ID}-naples", nodes=1, node_cpu="4", node_memory="8Gi"),
}


def _purge_sites(sites: dict[str, Site]) -> None:
    purge(*(site.cluster for site in sites.values()))


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


@pytest.fixture(scope="module")
def rome_consumes_from_milan(sites: dict[str, Site]) -> Iterator[None]:
    """The peering ``offloaded`` makes, undone once per module, then both clusters checked clean.

    An unpeer waits for the tenant namespaces to go, and Kubernetes' namespace controller takes up a deleted
    namespace only 5 s after the deletion (hard-coded): per test, that was a tenth of the suite's time.
    """
    yield
    asyncio.run(unpeered(sites["rome"], sites["milan"]))


@pytest.fixture
async def offloaded(sites: dict[str, Site], rome_consumes_from_milan: None) -> AsyncIterator[Offloaded]:
    """rome peered with milan (for the module), a fresh namespace offloaded there with Remote; unoffloaded after."""
    async with offloaded_to(sites["rome"], sites["milan"], strategy="Remote", keep_peering=True) as made:
        yield made


@pytest.fixture
async def not_peered(sites: dict[str, Site], rome_consumes_from_milan: None) -> None:
    """rome not consuming from milan, for a test that peers them its own way amid tests that use ``offloaded``."""
    await unpeered(sites["rome"], sites["milan"])
