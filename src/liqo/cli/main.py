"""``liqoctl`` (also ``kubectl liqo``): the command line of liqo.

Commands are thin: parse, call the capability package, print through :mod:`liqo.cli.output`. Expected
failures (bad input, unknown cluster, missing toolchain) become one readable line and exit code 1; a
traceback means a bug.
"""

from __future__ import annotations

import typer

from liqo.cli import install, kube, local, modes, network, offloading, peering

app = typer.Typer(
    name="liqoctl",
    help="Peer Kubernetes clusters and share their resources and services (a Python Liqo).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def global_options(kubeconfig: kube.Kubeconfig = None, context: kube.Context = None) -> None:
    """Options accepted before any command; the command's own, after it, win."""
    kube.choose(kubeconfig=kubeconfig, context=context)


app.add_typer(local.app, name="local")
app.command("install")(install.install_command)
app.command("uninstall")(install.uninstall_command)
app.add_typer(peering.peer_app, name="peer")
app.command("unpeer")(peering.unpeer)
app.command("allow")(peering.allow)
app.add_typer(peering.generate_app, name="generate")
app.add_typer(peering.get_app, name="get")
app.add_typer(peering.token_app, name="token")
app.command("info")(peering.info)
app.command("status")(peering.status)
app.command("discover")(peering.discover)
app.add_typer(modes.mode_app, name="mode")
app.add_typer(offloading.offload_app, name="offload")
app.add_typer(offloading.unoffload_app, name="unoffload")
app.add_typer(network.test_app, name="test")


def run() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    run()
