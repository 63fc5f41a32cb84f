"""``make bench-storage``: an offloaded pod's volume of class ``liqo`` against a pod's volume on the provider itself.

One run, two local clusters with one real node each, liqo on both (``liqoctl install``), home peered with the
provider, whose policy offers its node-local class ``local``. Two pods on the provider's real node, each with a
fresh volume there:

- **offloaded**: a pod at home in an offloaded namespace, with a claim of class ``liqo``: the claim is copied
  into its twin with class ``local`` and its pod runs on the provider (docs/offloading.md, "Volumes");
- **direct**: the same pod made on the provider itself, with a claim of class ``local``.

Each is measured ``--repeat`` times, alternately (direct, offloaded, direct...), so that the machine's load
falls on both alike: a sequential write of ``--mib`` MiB (``dd``, 1 MiB blocks, ``oflag=direct`` where the
node's filesystem allows it, else ``conv=fsync``), then a sequential read of it (``iflag=direct`` likewise; else
from the page cache, said in the output). Throughput is ``dd``'s own (bytes over its seconds): the command is
started through each side's API server (home's goes through the virtual kubelet), which does not count.
The last line is ``storage_ratio=X``: the lower of the write and read ratios, offloaded median over direct.

``--clusters HOME PROVIDER`` measures two clusters already peered (with the offer) and leaves them up.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import statistics
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.pods import install
from liqo.api.resources import SHARING_POLICIES
from liqo.api.storage import VIRTUAL_CLASS
from liqo.kube.client import KubeClient
from liqo.kube.podexec import execute
from liqo.kube.resources import NAMESPACES, PERSISTENT_VOLUME_CLAIMS, PODS
from liqo.kube.waiting import poll_until
from liqo.localclusters import clusters
from liqo.localclusters.layout import ClusterDir
from liqo.localclusters.realnodes import images
from liqo.localclusters.realnodes.volumes import STORAGE_CLASS
from liqo.localclusters.spec import ClusterSpec
from liqo.offloading import operations as offloading
from liqo.peering import operations as peering

console = Console(stderr=True)
NAMESPACE = "bench-storage"
COPIED = re.compile(r"(\d+) bytes .*copied, ([\d.]+) s")
"""``dd``'s summary (GNU: ``... copied, 1.2 s, 900 MB/s``): the bytes and the seconds it counted."""


@dataclass(frozen=True)
class Side:
    """One pod with a fresh volume: the client it is reached through, and its namespace."""

    label: str
    client: KubeClient
    namespace: str


def claim(namespace: str, storage_class: str, mib: int) -> dict[str, object]:
    """The bench pod's claim: room for twice what is written."""
    size = f"{max(1, (2 * mib) // 1024 + 1)}Gi"
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "bench", "namespace": namespace},
        "spec": {
            "storageClassName": storage_class,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": size}},
        },
    }


def pod(namespace: str) -> dict[str, object]:
    """The bench pod: idle, its volume at /data, for ``dd`` to run in."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bench", "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "dd",
                    "image": images.TOOLBOX_PINNED,
                    "command": ["sh", "-c", "exec sleep 86400"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "bench"}}],
        },
    }


async def running(side: Side) -> bool:
    """Whether the side's pod runs."""
    found = await side.client.get_or_none(PODS, "bench", namespace=side.namespace)
    return bool(found and (found.get("status") or {}).get("phase") == "Running")


async def dd(side: Side, arguments: list[str], *, direct: str, fallback: str) -> tuple[float, str]:
    """``dd`` in the side's pod with ``direct`` (or ``fallback`` where direct I/O is refused): MB/s, and the flag."""
    said = ""
    for flag in (direct, fallback):
        done = await execute(
            side.client,
            namespace=side.namespace,
            pod="bench",
            command=["dd", *arguments, *([flag] if flag else [])],
            timeout=600,
        )
        if done.exit_code == 0:
            found = COPIED.search(done.stderr)
            if found is None:
                raise RuntimeError(f"{side.label}: dd said {done.stderr!r}")
            return int(found.group(1)) / float(found.group(2)) / 1e6, flag or "page cache"
        said = done.stderr.strip() or done.message
    raise RuntimeError(f"{side.label}: dd failed: {said}")


async def measure(sides: list[Side], *, repeat: int, mib: int) -> dict[tuple[str, str], list[float]]:
    """Write then read ``mib`` MiB on each side, alternately, ``repeat`` times: MB/s by (side, operation)."""
    results: dict[tuple[str, str], list[float]] = {}
    flags: set[str] = set()
    for _ in range(repeat):
        for side in sides:
            write = ["if=/dev/zero", "of=/data/f", "bs=1M", f"count={mib}"]
            written, wflag = await dd(side, write, direct="oflag=direct", fallback="conv=fsync")
            read, rflag = await dd(side, ["if=/data/f", "of=/dev/null", "bs=1M"], direct="iflag=direct", fallback="")
            results.setdefault((side.label, "write"), []).append(written)
            results.setdefault((side.label, "read"), []).append(read)
            flags |= {wflag, rflag}
    console.print(f"dd flags used: {', '.join(sorted(flags))}")
    return results


@asynccontextmanager
async def clusters_up(names: list[str] | None) -> AsyncIterator[tuple[KubeClient, KubeClient]]:
    """Home and the provider: the given ones as they are, or two made here, peered, deleted after."""
    made: list[str] = []
    if names is None:
        suffix = os.urandom(2).hex()
        made = [f"bench-home-{suffix}", f"bench-far-{suffix}"]
        for name, cidr in zip(made, ("10.250.0.0/16", "10.251.0.0/16"), strict=True):
            await asyncio.to_thread(clusters.up, ClusterSpec(name=name, nodes=0, real_nodes=1, pod_cidr=cidr))
            await asyncio.to_thread(install, name)
    home_name, provider_name = names or made
    try:
        async with (
            KubeClient.from_kubeconfig(ClusterDir.named(home_name).kubeconfig) as home,
            KubeClient.from_kubeconfig(ClusterDir.named(provider_name).kubeconfig) as provider,
        ):
            if made:
                policy = {
                    "apiVersion": "sharing.liqo.io/v1alpha1",
                    "kind": "SharingPolicy",
                    "metadata": {"name": "all"},
                }
                storage = [{"class": STORAGE_CLASS, "capacity": "10Gi"}]
                await provider.create(SHARING_POLICIES, policy | {"spec": {"action": "Share", "storage": storage}})
                await peering.peer(home, provider, timeout=60)
            yield home, provider
    finally:
        for name in made:
            await asyncio.to_thread(clusters.down, name, purge=True)


async def run(*, repeat: int, mib: int, names: list[str] | None) -> None:
    """Both pods, the measurements, the table and the ratio; what was made here is deleted whatever happens."""
    async with clusters_up(names) as (home, provider):
        for client in (home, provider):
            await client.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        await offloading.offload(home, NAMESPACE, pod_offloading_strategy="Remote")
        await offloading.wait_offloaded(home, NAMESPACE, timeout=60)
        sides = [Side("direct", provider, NAMESPACE), Side("offloaded", home, NAMESPACE)]
        try:
            for side, storage_class in zip(sides, (STORAGE_CLASS, VIRTUAL_CLASS), strict=True):
                await side.client.create(PERSISTENT_VOLUME_CLAIMS, claim(side.namespace, storage_class, mib))
                await side.client.create(PODS, pod(side.namespace))
            for side in sides:
                await poll_until(partial(running, side), timeout=180, message=f"{side.label} pod never ran")
            results = await measure(sides, repeat=repeat, mib=mib)
        finally:
            await offloading.unoffload(home, NAMESPACE, timeout=120)
            for client in (home, provider):
                await client.delete(NAMESPACES, NAMESPACE, missing_ok=True)
    table = Table(title=f"sequential I/O, {mib} MiB, {repeat} runs each (median MB/s)")
    for column in ("operation", "direct", "offloaded", "ratio"):
        table.add_column(column, justify="right")
    ratios = []
    for operation in ("write", "read"):
        direct = statistics.median(results["direct", operation])
        offloaded = statistics.median(results["offloaded", operation])
        ratios.append(offloaded / direct)
        table.add_row(operation, f"{direct:.0f}", f"{offloaded:.0f}", f"{offloaded / direct:.3f}")
    Console().print(table)
    print(f"storage_ratio={min(ratios):.3f}")


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--mib", type=int, default=256, help="MiB written then read per run")
    parser.add_argument("--clusters", nargs=2, metavar=("HOME", "PROVIDER"))
    args = parser.parse_args()
    asyncio.run(run(repeat=args.repeat, mib=args.mib, names=args.clusters))


if __name__ == "__main__":
    main()
