"""Two test modules share a basename only where both are in packages, so each has one module name.

``tests/unit`` is no package: pytest imports its files by basename, so two of them may not share one.
``tests/integration`` is a package of packages, one per capability of ``src/liqo``
(``tests/integration/peering/test_auth.py`` is ``tests.integration.peering.test_auth``): there a basename may
repeat across folders (``offloading/test_pods.py``, ``network/test_pods.py``).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def in_package(path: Path) -> bool:
    return (path.parent / "__init__.py").exists()


def test_no_two_test_files_share_a_name() -> None:
    by_name: defaultdict[str, list[Path]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        by_name[path.name].append(path)
    assert not [name for name, paths in by_name.items() if len(paths) > 1 and not all(map(in_package, paths))]
