"""The order the lanes take modules in: a shared family's modules together, the longest first, heavy ones apart.

pytest-xdist hands each lane (worker) whole modules (``--dist loadfile``), in collection order, the next one
whenever a lane finishes its last. By itself it first sorts them by their number of tests, which puts a
one-test module of four minutes (the ``local`` stress) last: the other lanes then wait on it. Longest first
(the LPT rule) keeps the lanes' ends close. The seconds come from a measured table,
``tests/module-seconds.tsv``: build/test-times/modules.tsv of a lanes run, copied as it is (only its
``module`` and ``wall_s`` columns are read). A module not in it goes first: unknown is the safe guess, as a
long module started last is what leaves lanes idle.

Before length comes the family: the modules that use the shared clusters of :data:`SHARED` (fixtures of
tests/integration/conftest.py), in that order, then the rest; one of the rest's longest opens each family's
turn, so that the heaviest modules (their own clusters, real nodes) do not all run at once. A lane is
handed every module of one family before any of the next, so once it is given a module without the family
it will not need it again, and the conftest purges it there and then instead of keeping it idle to the end
of the run. The order is pure (:func:`module_order`); the hooks only read the table and the modules'
fixtures and apply it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

SECONDS = Path(__file__).resolve().parent / "module-seconds.tsv"
SHARED = ("naples", "sites", "cluster", "peer_cluster")
"""The shared cluster families, in the order their modules are handed out.

``naples`` is the third site, started beside ``sites`` (rome and milan) only for the modules that ask for it;
they go first, so that a lane drops naples as soon as it moves on to the modules that need two sites only
(an idle cluster with liqo costs the others about 9% of a core, and two lanes run sites modules for some
twenty minutes)."""


def read_seconds(text: str) -> dict[str, float]:
    """``module`` → ``wall_s`` from a time table (pure; a missing column or a bad row gives nothing)."""
    lines = [line.split("\t") for line in text.splitlines() if line.strip()]
    if not lines or "module" not in lines[0] or "wall_s" not in lines[0]:
        return {}
    module, wall = lines[0].index("module"), lines[0].index("wall_s")
    seconds = {}
    for row in lines[1:]:
        try:
            seconds[row[module]] = float(row[wall])
        except (IndexError, ValueError):
            continue
    return seconds


def family_rank(fixtures: Iterable[str]) -> int:
    """Where a module using ``fixtures`` goes: with the first family of :data:`SHARED` it uses (pure)."""
    used = set(fixtures)
    return next((rank for rank, family in enumerate(SHARED) if family in used), len(SHARED))


def module_order(
    modules: Sequence[str],
    seconds: Mapping[str, float],
    ranks: Mapping[str, int],
    *,
    one_lane: Iterable[str] = (),
) -> list[str]:
    """``modules`` by family, longest first, the unmeasured first of their family; and each shared family's turn
    opened by one of the longest modules of no family (pure; stable). The ``one_lane`` modules (one unit of
    work: :func:`unit_of`) come before all, longest first: together they are by far the longest unit, and
    the longest goes first (LPT).

    The longest modules of no family make clusters of their own, most with real nodes (install/test_pods,
    network/test_check, the local stress, network/test_fabric). Handed out last and together, they ran at
    once and each took up to 1.8 times as long as in a run where they overlapped less (1795 s against 1391 s
    for the whole run, nearly the same code). One opening each shared family's turn, they start apart: the
    same code then ran in 1585 s, its three lanes ending within 7 s of each other.
    """
    rest = len(SHARED)

    def longest_first(chosen: Iterable[str]) -> list[str]:
        return sorted(chosen, key=lambda m: -seconds.get(m, float("inf")))

    first = set(one_lane) & set(modules)
    groups = [
        longest_first(m for m in modules if ranks.get(m, rest) == rank and m not in first) for rank in range(rest + 1)
    ]
    shared = [group for group in groups[:rest] if group]
    openers = groups[rest][: len(shared)]
    order = longest_first(first)
    for opener, group in zip(openers, shared, strict=False):
        order += [opener, *group]
    order += [m for group in shared[len(openers) :] for m in group]
    return order + groups[rest][len(openers) :]


REAL_NODES = re.compile(r"real_nodes=[1-9]|--real-nodes")
"""How a module's source says it starts clusters with real nodes."""
REAL_NODE_LANE = "clusters with real nodes"


def unit_of(module: str, source: str) -> str:
    """What a lane takes whole: a module, or, for every integration module whose clusters have real nodes, all of
    them (pure; a unit test that merely spells a spec with real nodes starts none).

    A real node is a kubelet, containerd and liqo's pods (two managers, a virtual kubelet, gateways): a cluster
    with one costs several times a KWOK one, and pulls liqo's image at start. Handed out like any module,
    three or four such modules ran at once (their clusters up together, the load average past 50) and each took
    up to twice as long as alone, long enough for installs and probes to time out. In one lane they run one
    after the other, while the other lanes run the rest.
    """
    starts_real_nodes = module.startswith("tests/integration/") and REAL_NODES.search(source)
    return REAL_NODE_LANE if starts_real_nodes else module


@functools.cache
def _source(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with :func:`unit_of`'s units (any other mode: xdist's own)."""
    if config.getoption("dist", None) != "loadfile":
        return None
    root = config.rootpath

    class Lanes(LoadFileScheduling):  # type: ignore[misc]  # xdist ships no type information
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return unit_of(module, _source(root / module))

    return Lanes(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # our order, not xdist's count of tests per module


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    seconds = read_seconds(SECONDS.read_text()) if SECONDS.exists() else {}
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    ranks = {
        module: family_rank(name for item in module_items for name in getattr(item, "fixturenames", ()))
        for module, module_items in by_module.items()
    }
    one_lane = {m for m, module_items in by_module.items() if unit_of(m, _source(module_items[0].path)) != m}
    order = module_order(list(by_module), seconds, ranks, one_lane=one_lane)
    items[:] = [item for module in order for item in by_module[module]]
