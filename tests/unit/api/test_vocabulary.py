"""The domain's words are spelt in ``liqo.api`` only: no bare literal of them anywhere else in ``src/liqo``.

A phase, condition type, status or reason written as a string in a controller is a second spelling that can
drift from the CRD's schema and from the code that reads it. Several of our words are also Kubernetes' own
(a pod is ``Pending``, a Node ``Ready``, a CSR ``Denied``, an HTTP answer ``Conflict``): each such use is
listed below with what it means there, so that any new one has to say why it is not ours.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path

from liqo.api.foreignclusters import ConditionStatus, ConditionType, Reason
from liqo.api.networkconfigs import ConnectionReason, ConnectionState
from liqo.api.offers import OfferPhase, OfferState
from liqo.api.offloadings import OffloadingPhase, TwinPhase
from liqo.api.shadowpods import ShadowPodPhase, ShadowPodReason

VOCABULARY: tuple[type[StrEnum], ...] = (
    ConditionStatus,
    ConditionType,
    ConnectionReason,
    ConnectionState,
    OfferPhase,
    OfferState,
    OffloadingPhase,
    Reason,
    ShadowPodPhase,
    ShadowPodReason,
    TwinPhase,
)
SRC = Path(__file__).resolve().parents[3] / "src" / "liqo"

NOT_OURS = {
    ("apps/virtualkubelet.py", "None"): "the --reflect-secrets choice",
    ("peering/bootstrap.py", "Conflict"): "an HTTP 409's reason",
    ("install/installer.py", "Established"): "a CRD's condition type",
    ("install/manifests.py", "Forbidden"): "a ValidatingAdmissionPolicy's reason",
    ("install/manifests.py", "None"): "a webhook's sideEffects, a Service's clusterIP",
    ("kube/csr.py", "Denied"): "a CSR's condition type",
    ("kube/podstate.py", "Pending"): "a pod's phase",
    ("kube/podstate.py", "Ready"): "a pod's condition type",
    ("localclusters/clusters.py", "Ready"): "a Node's condition type",
    ("localclusters/supervisor.py", "Waiting"): "a local component's state",
    ("localclusters/supervisor.py", "Pending"): "a local component's state",
    ("network/testrun.py", "Ready"): "a Node's condition type",
    ("offloading/registration.py", "Conflict"): "an HTTP 409's reason",
    ("peering/operations.py", "Waiting"): "what liqoctl prints before any reason",
    ("peering/operations.py", "None"): "the peer's role in liqoctl info",
    ("sharing/capacity.py", "Ready"): "a Node's condition type",
    ("virtualkubelet/forge/node.py", "Ready"): "a Node's condition type",
    ("virtualkubelet/forge/pods.py", "Pending"): "a pod's phase",
    ("virtualkubelet/forge/pods.py", "Ready"): "a pod's condition type",
    ("virtualkubelet/forge/services.py", "None"): "a Service's clusterIP",
    ("virtualkubelet/metrics.py", "Pending"): "a pod's phase",
    ("virtualkubelet/reflection/steps.py", "None"): "the --reflect-* choice",
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def bare_words(root: Path = SRC) -> Iterator[tuple[str, int, str]]:
    """Every string literal under ``root`` but in ``api/`` (docstrings aside) that is one of our words."""
    words = {member.value for enum in VOCABULARY for member in enum}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith("api/"):
            continue
        tree = ast.parse(path.read_text())
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in words and id(node) not in docstrings:
                yield relative, node.lineno, str(node.value)


def test_the_domains_words_are_spelt_in_liqo_api_only() -> None:
    found = list(bare_words())
    ours = [f"src/liqo/{path}:{line}: {word!r}" for path, line, word in found if (path, word) not in NOT_OURS]
    assert not ours, "use the enum from liqo.api (or list here why the word is not ours):\n" + "\n".join(ours)
    stale = set(NOT_OURS) - {(path, word) for path, _, word in found}
    assert not stale, f"listed but no longer there: {sorted(stale)}"


def test_the_scan_finds_a_bare_word_and_skips_docstrings_and_liqo_api(tmp_path: Path) -> None:
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "words.py").write_text('OVER_BUDGET = "OverBudget"\n')
    (tmp_path / "controller.py").write_text('"""OverBudget, in prose."""\n\nphase = "x"\nreason = "OverBudget"\n')
    assert list(bare_words(tmp_path)) == [("controller.py", 4, "OverBudget")]
