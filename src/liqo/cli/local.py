"""``liqoctl local``: real Kubernetes clusters on this machine (etcd, API server, controllers, kwok nodes)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from liqo.cli.errors import expected_errors
from liqo.cli.output import OUTPUT_OPTION, Format, emit, line, out, progress, table
from liqo.localclusters import clusters, toolchain
from liqo.localclusters.realnodes import images
from liqo.localclusters.spec import ClusterSpec, SpecRequest, parse_labels

app = typer.Typer(help="Local clusters for demos and tests (no container runtime needed).", no_args_is_help=True)

Name = Annotated[str, typer.Argument(help="Cluster name (lowercase letters, digits and '-').")]


def _new(field: str) -> str:
    """Help text: a flag's value for a new cluster (on an existing one, a flag left out means as stored)."""
    return f" New cluster: {ClusterSpec.__dataclass_fields__[field].default}."


@app.command()
def build(
    real_nodes: Annotated[
        bool, typer.Option("--real-nodes", help="Also build what real nodes need: kubelet, containerd, images.")
    ] = False,
) -> None:
    """Build the Kubernetes binaries from their Go modules and fetch helm (only what the cache lacks)."""
    with expected_errors():
        path = toolchain.ensure_binaries(progress=progress)
        toolchain.ensure_helm(progress=progress)
        if real_nodes:
            out.print(str(toolchain.ensure_node_binaries(progress=progress)))
            for archive in images.ensure_images(progress=progress):
                out.print(str(archive))
    out.print(str(path))


@app.command("build-image")
def build_image() -> None:
    """Build liqo's own image from this source tree (cached); print its archive and its reference."""
    with expected_errors():
        archive = images.ensure_liqo_image(progress=progress)
    out.print(str(archive))
    out.print(images.liqo_image_ref())


@app.command()
def up(
    name: Name,
    nodes: Annotated[
        int | None, typer.Option(help=f"Number of fake (kwok) nodes (0 is allowed with --real-nodes).{_new('nodes')}")
    ] = None,
    real_nodes: Annotated[
        int | None,
        typer.Option(
            help="Number of real nodes (kubelet + containerd, each in its own namespaces; needs root)."
            + _new("real_nodes")
        ),
    ] = None,
    node_cpu: Annotated[
        str | None, typer.Option(help=f"CPU of each node (a quantity: 8, 500m).{_new('node_cpu')}")
    ] = None,
    node_memory: Annotated[
        str | None, typer.Option(help=f"Memory of each node (a quantity: 32Gi).{_new('node_memory')}")
    ] = None,
    node_pods: Annotated[int | None, typer.Option(help=f"Maximum pods per node.{_new('node_pods')}")] = None,
    node_storage: Annotated[
        str | None,
        typer.Option(help=f"What each real node holds for volumes (a quantity: 20Gi).{_new('node_storage')}"),
    ] = None,
    pod_cidr: Annotated[
        str | None, typer.Option(help=f"Pod CIDR (may overlap another cluster's).{_new('pod_cidr')}")
    ] = None,
    service_cidr: Annotated[str | None, typer.Option(help=f"Service CIDR.{_new('service_cidr')}")] = None,
    node_labels: Annotated[str | None, typer.Option(help="Extra node labels: k=v,k2=v2. New cluster: none.")] = None,
    cpus: Annotated[
        str | None,
        typer.Option(
            help="Pin every process of the cluster (control plane, kwok, real nodes, liqo's components run "
            "by the cluster) to these CPUs, in taskset's list syntax: 0, 0-1, 0,2. New cluster: not pinned."
        ),
    ] = None,
) -> None:
    """Start a local cluster, or resume one as it was made (a flag left out keeps the stored value).

    A flag given with another value than the one the cluster was made with is refused: `down --purge` first.
    """
    with expected_errors():
        flags = {
            "nodes": nodes,
            "real_nodes": real_nodes,
            "node_cpu": node_cpu,
            "node_memory": node_memory,
            "node_pods": node_pods,
            "node_storage": node_storage,
            "pod_cidr": pod_cidr,
            "service_cidr": service_cidr,
            "node_labels": parse_labels(node_labels) if node_labels is not None else None,
            "cpus": cpus,
        }
        request = SpecRequest(name, {key: value for key, value in flags.items() if value is not None})
        info = clusters.up(request, progress=progress)
    real = f", real nodes {info.real_nodes}" if not info.real_nodes.endswith("/0") else ""
    pinned = f", pinned to CPUs {info.cpus}" if info.cpus else ""
    line(
        "cluster [bold]{name}[/bold] is {state}: API {api}, nodes {nodes}{real}{pinned}",
        name=info.name,
        state=info.state,
        api=info.api_url,
        nodes=info.nodes,
        real=real,
        pinned=pinned,
    )
    out.print(f"use it with: eval $(liqoctl local env {info.name})")


@app.command()
def down(
    name: Name,
    purge: Annotated[bool, typer.Option(help="Also delete the cluster's data (etcd, PKI, logs).")] = False,
) -> None:
    """Stop every process of a local cluster; with --purge, delete it."""
    with expected_errors():
        stopped = clusters.down(name, purge=purge)
    out.print(f"cluster {name} {'deleted' if purge else 'stopped'} ({len(stopped)} processes stopped)")


@app.command("list")
def list_(output: Format = OUTPUT_OPTION) -> None:
    """List local clusters with their API URL, state, Ready nodes and unhealthy components."""
    with expected_errors():
        infos = clusters.listing()
    if emit([i.to_dict() for i in infos], fmt=output):
        return
    table(
        ["name", "api url", "state", "nodes", "real nodes", "cpus", "restarts", "unhealthy"],
        [
            [
                *(i.name, i.api_url, i.state, i.nodes, i.real_nodes, i.cpus or "all"),
                *(str(i.restarts), ",".join(i.unhealthy) or "-"),
            ]
            for i in infos
        ],
    )


@app.command()
def env(name: Name) -> None:
    """Print the shell exports that point kubectl at a cluster: eval $(liqoctl local env NAME)."""
    with expected_errors():
        variables = clusters.env(name)
    for key, value in variables.items():
        out.print(f"export {key}={shlex.quote(value)}")


@app.command("load-image")
def load_image(
    name: Name,
    archive: Annotated[Path, typer.Argument(help="An OCI layout or docker image archive (tar).", exists=True)],
) -> None:
    """Import an image archive into every real node of a cluster (no registry needed)."""
    with expected_errors():
        loaded = clusters.load_image(name, archive)
    out.print(f"loaded {', '.join(loaded)} into the real nodes of {name}")


Components = Annotated[
    list[str], typer.Argument(help="etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok.")
]


@app.command()
def stop(name: Name, components: Components) -> None:
    """Stop components of a running cluster (fault drills); they stay stopped until `start` or `up`."""
    _set_components(name, components, enabled=False)


@app.command()
def start(name: Name, components: Components) -> None:
    """Start components stopped with `liqoctl local stop` and wait until they are healthy."""
    _set_components(name, components, enabled=True)


def _set_components(name: str, components: list[str], *, enabled: bool) -> None:
    with expected_errors():
        clusters.set_components(name, components, enabled=enabled)
    out.print(f"{', '.join(components)} {'started' if enabled else 'stopped'} on {name}")
