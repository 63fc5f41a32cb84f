"""Which cluster a command talks to: ``--kubeconfig`` / ``--context`` as kubectl reads them.

Both are accepted before the command (``liqoctl --kubeconfig F offload namespace X``, where kubectl users put
them) and after it; the command's own wins. They name the local cluster only: a remote cluster is always
named by its own options (``--remote-kubeconfig``), never by the global ones.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from liqo.kube.client import KubeClient
from liqo.kube.kubeconfig import KubeconfigError

Kubeconfig = Annotated[
    str | None, typer.Option("--kubeconfig", help="kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config).")
]
Context = Annotated[str | None, typer.Option("--context", help="kubeconfig context (default: the current one).")]
Timeout = Annotated[float, typer.Option(help="Seconds to wait before giving up with the reason.", min=0)]


@dataclass
class _Chosen:
    kubeconfig: str | None = None
    context: str | None = None


_global = _Chosen()
"""What was given before the command (set by :func:`choose`, once per process: a CLI run)."""


def choose(*, kubeconfig: str | None, context: str | None) -> None:
    """Remember the options given before the command, for every :func:`client_for` of the local cluster."""
    _global.kubeconfig, _global.context = kubeconfig, context


def client_for(
    kubeconfig: str | None, context: str | None = None, *, name: str = "local", remote: bool = False
) -> KubeClient:
    """A client as kubectl would pick it; raises KubeconfigError with the path it tried."""
    if not remote:
        kubeconfig, context = kubeconfig or _global.kubeconfig, context or _global.context
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config")
    if not Path(path).is_file():
        raise KubeconfigError(f"no kubeconfig at {path}: pass --kubeconfig or set KUBECONFIG")
    return KubeClient.from_kubeconfig(path, context=context, name=name)
