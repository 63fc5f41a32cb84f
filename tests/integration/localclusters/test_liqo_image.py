"""liqo's own image on a real node: preloaded by ``local up`` from this source tree, run as uid 65532.

The node must hold the very archive the cache has for this source (its digest, not only its name), pods
must run every entry point from it without pulling, and the cluster's registry must serve it to a pod
that pulls.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from liqo.kube.resources import PODS
from liqo.localclusters.layout import read_json
from liqo.localclusters.realnodes import host, images
from liqo.localclusters.realnodes.enter import held_images
from liqo.localclusters.realnodes.nodes import real_nodes
from liqo.localclusters.spec import ClusterSpec
from tests.integration.helpers import LocalCluster, eventually_sync, kubectl, purge, start, unique
from tests.shared import eventually

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(os.geteuid() != 0, reason="real nodes need root"),
    pytest.mark.skipif(images.project_source() is None, reason="liqo's image is built from the source tree"),
]


@pytest.fixture(scope="module")
def real() -> Iterator[LocalCluster]:
    local = start(ClusterSpec(name=unique("img"), nodes=0, real_nodes=1))
    yield local
    purge(local)


def held_by_the_node(cluster: LocalCluster) -> dict[str, str]:
    stored = read_json(cluster.dir.cluster_file)
    [node] = real_nodes(cluster=cluster.name, count=1, underlay=int(stored["underlay"]), cluster_root=cluster.dir.root)
    ctr = os.path.join(stored["nodeBinDir"], "ctr")
    return held_images(host.run_in_node(node, ctr, "--namespace", "k8s.io", "images", "list").stdout)


async def test_a_pod_runs_every_entry_point_of_the_preloaded_image_as_uid_65532(real: LocalCluster) -> None:
    ref = images.liqo_image_ref()
    project = images.project_source()
    assert project is not None
    built = images.archive_images(images.liqo_archive(project))[ref]
    # Imported while the kubelet runs: wait for it, then run without pulling (Never) to prove it is there.
    eventually_sync(
        lambda: held_by_the_node(real).get(ref) == built, timeout=120, message=f"{ref} ({built}) on the node"
    )

    def container(name: str, *args: str, **extra: Any) -> dict[str, Any]:
        return {"name": name, "image": ref, "imagePullPolicy": "Never", "args": list(args), **extra}

    whoami = "import os, liqo; print(os.getuid(), os.getgid(), liqo.__file__)"
    name = unique("liqo")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                container("manager", "liqo.apps.manager", "--help"),
                container("virtual-kubelet", "liqo.apps.virtualkubelet", "--help"),
                container("liqoctl", "liqo.cli.main", "--help"),
                # Pulled: the cluster's registry serves the same image.
                container("whoami", "-c", whoami, command=["/usr/bin/python3"], imagePullPolicy="Always"),
            ],
        },
    }
    async with real.client() as real_kube:
        await real_kube.create(PODS, pod)
        phase = ""

        async def finished() -> bool:
            nonlocal phase
            phase = (await real_kube.get(PODS, name, namespace="default")).get("status", {}).get("phase", "")
            return phase in ("Succeeded", "Failed")

        await eventually(finished, timeout=120, message=f"pod {name} finished")
        assert phase == "Succeeded", kubectl(real, "describe", "pod", name)

    def logs(container_name: str) -> str:
        return kubectl(real, "logs", name, "-c", container_name)

    assert logs("manager").startswith("usage: liqo-manager")
    assert logs("virtual-kubelet").startswith("usage: liqo-virtual-kubelet")
    assert "Usage:" in logs("liqoctl")
    assert logs("whoami").split() == ["65532", "65532", "/opt/liqo/liqo/__init__.py"]
    messages = kubectl(
        real, "get", "events", "--field-selector", f"involvedObject.name={name}", "-o", "jsonpath={.items[*].message}"
    )
    assert f'Successfully pulled image "{ref}"' in messages
