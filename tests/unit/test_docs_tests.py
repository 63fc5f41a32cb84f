"""The tests the docs name exist: a threat model row that names a renamed test proves nothing any more.

``docs/security.md`` names, for each rule, the test that proves it: ``test_file.py::test_name``, or with the end
of its path where the basename alone is not one file (``integration/peering/test_auth.py::test_name``; the
integration packages may repeat a basename, :mod:`test_test_names`). A named file is the one test file whose
path ends so, and the function is defined in it.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMED = re.compile(r"(?<![\w/])((?:[\w-]+/)*test_\w+\.py)::(test_\w+)")


def named_tests() -> list[tuple[str, str, str]]:
    """(doc, file, function) for every test a doc names."""
    return [
        (doc.name, file, function)
        for doc in sorted((ROOT / "docs").glob("*.md"))
        for file, function in NAMED.findall(doc.read_text())
    ]


def resolve(named: str, paths: list[str]) -> list[str]:
    """The test files (paths relative to the repository) whose path ends with ``named`` (pure)."""
    return [path for path in paths if path == named or path.endswith(f"/{named}")]


def test_every_test_a_doc_names_exists() -> None:
    files = {str(path.relative_to(ROOT)): path for path in (ROOT / "tests").rglob("test_*.py")}
    missing = []
    for doc, file, function in named_tests():
        found = resolve(file, list(files))
        if len(found) != 1 or not re.search(rf"def {function}\(", files[found[0]].read_text()):
            missing.append(f"{doc}: {file}::{function}" + (f" (one of {found})" if len(found) > 1 else ""))
    assert not missing, "\n".join(missing)


def test_the_threat_model_names_tests() -> None:
    assert len([t for t in named_tests() if t[0] == "security.md"]) > 50


PROOF_COLUMNS = ("test", "proved by", "proven by", "what bounds it, and the test", "cannot (and the test that tries)")


def proof_cells(text: str) -> list[tuple[str, str]]:
    """(first cell, proof cell) of every row of the tables whose last column names the proof (pure)."""
    rows: list[tuple[str, str]] = []
    header: list[str] | None = None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif not set(line) <= set("|-: ") and header[-1] in PROOF_COLUMNS:
            rows.append((cells[0], cells[-1]))
    return rows


def test_every_row_of_the_threat_model_says_what_proves_it() -> None:
    """A test by name, or "same" as the row above, or the integration test the section describes."""
    rows = proof_cells((ROOT / "docs" / "security.md").read_text())
    unproved = [
        first for first, proof in rows if "test_" not in proof and not re.match(r"(same|unit|the integration)", proof)
    ]
    assert len(rows) > 80
    assert not unproved, unproved
