"""Which cluster a command talks to: ``--kubeconfig`` / ``--context`` as kubectl reads them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from liqo.kube.client import KubeClient
from liqo.kube.kubeconfig import KubeconfigError

Kubeconfig = Annotated[
    str | None, typer.Option("--kubeconfig", help="kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config).")
]
Context = Annotated[str | None, typer.Option("--context", help="kubeconfig context (default: the current one).")]


def client_for(kubeconfig: str | None, context: str | None = None, *, name: str = "local") -> KubeClient:
    """A client as kubectl would pick it; raises KubeconfigError with the path it tried."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube" / "config")
    if not Path(path).is_file():
        raise KubeconfigError(f"no kubeconfig at {path}: pass --kubeconfig or set KUBECONFIG")
    return KubeClient.from_kubeconfig(path, context=context, name=name)
