"""Throwaway network namespaces, for the tests that check rulesets, routes and ``wg`` against the real tools.

Only namespaces these tests create are touched; the tests are skipped without root or without the tools.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest


def needs(*tools: str) -> pytest.MarkDecorator:
    """Skip unless running as root with every one of ``tools`` (and ``ip``) installed."""
    missing = [tool for tool in ("ip", *tools) if shutil.which(tool) is None]
    return pytest.mark.skipif(
        os.geteuid() != 0 or bool(missing),
        reason=f"needs root and {', '.join(missing)}" if missing else "needs root",
    )


@contextmanager
def netns() -> Iterator[str]:
    """A new, empty network namespace's name; deleted on exit."""
    name = f"x-test-{os.getpid()}-{secrets.token_hex(3)}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=True)


def run_in(namespace: str, *argv: str, input: str | None = None) -> str:
    """Run ``argv`` in ``namespace``; its stdout (raises CalledProcessError with its stderr on failure)."""
    result = subprocess.run(
        ["ip", "netns", "exec", namespace, *argv], input=input, capture_output=True, text=True, check=False
    )
    if result.returncode:
        raise subprocess.CalledProcessError(result.returncode, argv, result.stdout, result.stderr)
    return result.stdout
