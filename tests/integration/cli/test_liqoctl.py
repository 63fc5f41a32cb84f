"""liqoctl as users run it (a subprocess per command) against clusters with liqo installed."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import orjson
import pytest
import yaml

from liqo.api.crds import all_crds
from liqo.install import manifests
from liqo.install.installer import BY_KIND
from liqo.kube.client import KubeClient
from liqo.kube.errors import NotFoundError
from liqo.kube.resources import CONFIGMAPS
from tests.integration.helpers import LocalCluster, Site, expect_clean, liqoctl_run
from tests.shared import SAMPLE_VALUES


async def run(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(liqoctl_run, *args)


async def test_out_of_band_peering_info_status_kubeconfig_and_unpeer(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    rome_kc = f"--kubeconfig={sites['rome'].cluster.kubeconfig}"
    milan_kc = f"--kubeconfig={sites['milan'].cluster.kubeconfig}"
    generated = await run("generate", "peer-command", milan_kc)
    assert generated.returncode == 0, generated.stderr
    command = generated.stdout.split()
    assert command[:3] == ["liqoctl", "peer", "out-of-band"]

    peered = await run(*command[1:], rome_kc)
    assert peered.returncode == 0, peered.stderr
    assert "accepted offer" in peered.stdout

    info = await run("info", "-o", "json", rome_kc)
    report = orjson.loads(info.stdout)
    (peer,) = report["peers"]
    assert peer["clusterID"] == sites["milan"].cluster_id
    assert peer["role"] == "Consumer"
    assert peer["accepted"]["cpu"]

    status = await run("status", rome_kc)
    assert "every peering is established" in status.stdout

    kubeconfig = await run("get", "kubeconfig", "--peer", peer["name"], rome_kc)
    identity = yaml.safe_load(kubeconfig.stdout)
    async with KubeClient.from_kubeconfig_dict(identity) as as_peer:
        version = await as_peer.request("GET", "/version")
        assert version["gitVersion"].startswith("v1.")

    wrong = await run("unpeer", "nobody", rome_kc)
    assert wrong.returncode == 1
    assert "no peer named 'nobody'" in wrong.stderr

    unpeered = await run("unpeer", peer["name"], rome_kc)
    assert unpeered.returncode == 0, unpeered.stderr
    await expect_clean(rome, milan)


async def test_peer_out_of_band_with_a_wrong_cluster_id_is_refused_before_anything_is_written(
    sites: dict[str, Site], rome: KubeClient
) -> None:
    milan_site = sites["milan"]
    async with milan_site.client() as client:
        identity_url = (await client.get(CONFIGMAPS, "liqo-cluster-identity", namespace="liqo"))["data"]["authURL"]
    result = await run(
        "peer", "out-of-band", "milan", f"--auth-url={identity_url}", "--cluster-id=not-milan", "--auth-token=x",
        f"--key-fingerprint=sha256:{'0' * 64}", f"--kubeconfig={sites['rome'].cluster.kubeconfig}",
    )  # fmt: skip
    assert result.returncode == 1
    assert "not to not-milan" in " ".join(result.stderr.split())
    await expect_clean(rome)


async def test_dry_run_manifests_are_accepted_by_a_real_api_server(sites: dict[str, Site]) -> None:
    """The real-cluster path (Deployment + Service) cannot run here, but the API server validates it."""
    printed = await run("install", "--dry-run", f"--kubeconfig={sites['milan'].cluster.kubeconfig}")
    assert printed.returncode == 0, printed.stderr
    documents = list(yaml.safe_load_all(printed.stdout))
    kinds = [d["kind"] for d in documents]
    assert kinds.count("CustomResourceDefinition") == len(all_crds())
    assert "Deployment" not in kinds  # a local cluster runs the manager under its supervisor
    [settings] = [d for d in documents if d["metadata"]["name"] == "liqo-settings"]
    assert (settings["data"]["podCIDR"], settings["data"]["serviceCIDR"]) == ("10.245.0.0/16", "10.96.0.0/16")
    assert not [d for d in documents if d["kind"] == "Secret"]  # the key and the token are the manager's to make
    workload = [*manifests.manager_workload(SAMPLE_VALUES), *manifests.virtual_kubelet_workload(SAMPLE_VALUES)]
    async with sites["milan"].client() as client:
        for document in workload:
            admitted = await client.apply(BY_KIND[document["kind"]], document, dry_run=True)
            assert admitted["metadata"]["name"] == document["metadata"]["name"]


def as_remote(cluster: LocalCluster, path: Path) -> Path:
    """A kubeconfig reaching ``cluster`` as ``localhost``: install then takes it for a cluster that is not local."""
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in config["clusters"]:
        entry["cluster"]["server"] = entry["cluster"]["server"].replace("127.0.0.1", "localhost")
    path.write_text(yaml.safe_dump(config))
    return path


async def test_install_elsewhere_than_a_local_cluster_asks_for_the_network_and_never_guesses_it(
    cluster: LocalCluster, kube: KubeClient, tmp_path: Path
) -> None:
    with pytest.raises(NotFoundError):  # never installed: no network recorded to keep
        await kube.get(CONFIGMAPS, "liqo-cluster-identity", namespace="liqo")
    remote = f"--kubeconfig={as_remote(cluster, tmp_path / 'remote.kubeconfig')}"
    refused = await run("install", "--dry-run", remote)
    assert refused.returncode == 1
    message = " ".join(refused.stderr.split())
    assert "--pod-cidr and --service-cidr are required" in message
    assert "liqo does not guess it" in message
    half = await run("install", "--dry-run", "--pod-cidr=10.50.0.0/16", remote)
    assert half.returncode == 1
    assert "--service-cidr is required" in " ".join(half.stderr.split())
    printed = await run("install", "--dry-run", "--pod-cidr=10.50.0.0/16", "--service-cidr=10.51.0.0/16", remote)
    assert printed.returncode == 0, printed.stderr
    documents = list(yaml.safe_load_all(printed.stdout))
    assert "Deployment" in [d["kind"] for d in documents]  # the path of a cluster that is not local
    [settings] = [d for d in documents if d["metadata"]["name"] == "liqo-settings"]
    assert (settings["data"]["podCIDR"], settings["data"]["serviceCIDR"]) == ("10.50.0.0/16", "10.51.0.0/16")


async def test_install_on_a_local_cluster_refuses_a_network_other_than_its_own(sites: dict[str, Site]) -> None:
    milan_kc = f"--kubeconfig={sites['milan'].cluster.kubeconfig}"
    refused = await run("install", "--dry-run", "--pod-cidr=10.244.0.0/16", milan_kc)
    assert refused.returncode == 1
    assert "--pod-cidr 10.244.0.0/16 is not this local cluster's: it was made with 10.245.0.0/16" in " ".join(
        refused.stderr.split()
    )
