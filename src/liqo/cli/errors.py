"""The failures a user can cause or fix, turned into one line on stderr and exit code 1."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from liqo.api.networks import InvalidNetwork
from liqo.cli.output import fail
from liqo.install.installer import InstallError
from liqo.kube.errors import KubeError
from liqo.kube.kubeconfig import KubeconfigError
from liqo.kube.waiting import WaitTimeout
from liqo.localclusters.clusters import ClusterError
from liqo.localclusters.realnodes.host import HostError
from liqo.localclusters.realnodes.images import ImageError
from liqo.localclusters.spec import SpecError
from liqo.localclusters.toolchain import BuildError, ToolchainError
from liqo.peering.operations import PeeringError

EXPECTED = (
    SpecError,
    ClusterError,
    ToolchainError,
    BuildError,
    ImageError,
    HostError,
    InstallError,
    PeeringError,
    KubeconfigError,
    WaitTimeout,
    KubeError,
    InvalidNetwork,  # a cluster's recorded network edited by hand into one no cluster may claim
)


@contextmanager
def expected_errors() -> Iterator[None]:
    """Run a command body; expected failures exit 1 with their message, bugs keep their traceback."""
    try:
        yield
    except EXPECTED as exc:
        fail(str(exc))
