"""Names and bounds (issue #7): what a peer names or writes cannot take over, squat, jam or loop.

Each attack is made with the peer's own identity (rome's identity on the provider) or with what a peer says
about itself (the name in its out-of-band peer command), where it matters with rome's own components stopped
so that only the provider's defences stand. docs/security.md, "Names and bounds", points at each test.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest

from liqo.api import names
from liqo.api.components import MANAGER, VIRTUAL_KUBELET
from liqo.api.crds.schema import MAX_NAMESPACE_MAPPINGS
from liqo.api.resources import NAMESPACE_MAPS, SHADOW_PODS, VIRTUAL_NODES
from liqo.install.installer import InstallOptions, install, uninstall
from liqo.kube.client import FIELD_MANAGER, KubeClient
from liqo.kube.errors import ConflictError, InvalidError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import CLUSTER_ROLES, CRDS, CSRS, LEASES, NAMESPACES, NODES, PODS, SECRETS, Resource
from liqo.localclusters.launch import detect
from liqo.offloading import operations as offloading
from liqo.peering import operations as peering
from liqo.virtualkubelet.forge import node as forge_node
from liqo.virtualkubelet.forge import pods as forge_pods
from tests.integration.helpers import (
    Offloaded,
    Site,
    expect_clean,
    namespace_map,
    pod,
    recorded_event,
    running_pods,
    stopped,
    unique,
)
from tests.shared import eventually

RBAC = "rbac.authorization.k8s.io"
POLICIES = Resource(
    "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", namespaced=False
)
POLICY_BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)


async def get_or_none(client: KubeClient, resource: Resource, name: str, namespace: str | None = None) -> Obj | None:
    try:
        found: Obj = await client.get(resource, name, namespace=namespace)
    except NotFoundError:
        return None
    return found


def registered(virtual_node: Obj | None) -> Obj | None:
    conditions = ((virtual_node or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == forge_node.REGISTERED), None)


# -- virtual node names and ownership ----------------------------------------------------------------------------


async def test_providers_with_colliding_names_each_get_their_own_node(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, naples: KubeClient
) -> None:
    milan_id, naples_id = sites["milan"].cluster_id, sites["naples"].cluster_id
    await peering.peer(rome, milan, timeout=60)
    milan_fc = await peering.foreign_cluster(rome, milan_id)
    assert milan_fc is not None
    # naples calls itself milan, capitalised, in the command it hands out: its word is all rome has.
    claimed = milan_fc["spec"]["clusterName"].upper()
    command = dataclasses.replace(await peering.peer_command(naples), name=claimed)
    try:
        await peering.peer_out_of_band(rome, command)
        await peering.wait_established(rome, naples_id, timeout=60)
        naples_fc = await peering.foreign_cluster(rome, naples_id)
        assert naples_fc is not None
        assert naples_fc["spec"]["clusterName"] == claimed
        assert naples_fc["metadata"]["name"] == f"{milan_fc['metadata']['name']}-{naples_id[:8]}"
        nodes = {}
        for provider_id, fc in ((milan_id, milan_fc), (naples_id, naples_fc)):
            name = names.virtual_node_name(fc["metadata"]["name"])

            async def ready(name: str = name, provider_id: str = provider_id) -> bool:
                node = await get_or_none(rome, NODES, name)
                if node is None or node["metadata"]["labels"].get(names.REMOTE_CLUSTER_ID) != provider_id:
                    return False
                conditions = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
                return conditions.get("Ready") == "True"

            await eventually(ready, timeout=60, message=f"node {name} of {provider_id} Ready")
            virtual_node = await rome.get(VIRTUAL_NODES, name, namespace=names.tenant_namespace(provider_id))
            assert (registered(virtual_node) or {}).get("status") == "True"
            nodes[provider_id] = name
        assert nodes[milan_id] != nodes[naples_id]
    finally:
        for provider_id in (naples_id, milan_id):
            with contextlib.suppress(peering.PeeringError):
                await peering.unpeer(rome, provider_id, timeout=60)
    await expect_clean(rome, milan, naples)


@contextlib.asynccontextmanager
async def peered_as(rome: KubeClient, provider: KubeClient, *, provider_id: str, name: str) -> AsyncIterator[None]:
    """Rome peered with ``provider``, which calls itself ``name`` in its out-of-band command; unpeered after."""
    command = dataclasses.replace(await peering.peer_command(provider), name=name)
    try:
        await peering.peer_out_of_band(rome, command)
        await peering.wait_established(rome, provider_id, timeout=60)
        yield
    finally:
        with contextlib.suppress(peering.PeeringError):
            await peering.unpeer(rome, provider_id, timeout=60)


async def expect_registered(rome: KubeClient, node_name: str, *, tenant: str, status: str) -> Obj:
    """Wait until the VirtualNode's ``Registered`` condition has ``status``; return the condition."""

    async def reached() -> bool:
        return (registered(await get_or_none(rome, VIRTUAL_NODES, node_name, tenant)) or {}).get("status") == status

    await eventually(reached, timeout=30, message=f"VirtualNode {node_name} Registered={status}")
    condition = registered(await rome.get(VIRTUAL_NODES, node_name, namespace=tenant))
    assert condition is not None
    return condition


async def expect_untouched(rome: KubeClient, expected: Obj) -> None:
    """The Node ``expected`` is as it was created: nothing of a virtual node on it, no Lease for it."""
    name = expected["metadata"]["name"]
    node = await rome.get(NODES, name)
    assert node["metadata"]["uid"] == expected["metadata"]["uid"]
    # Kubernetes' node lifecycle controller may add the beta os/arch labels: its queue is keyed by name, and its
    # cache can still hold our deleted Node (labelled kubernetes.io/os) when it patches the namesake by name.
    labels = node["metadata"]["labels"]
    added = {key: value for key, value in labels.items() if expected["metadata"]["labels"].get(key) != value}
    assert set(added) <= {"beta.kubernetes.io/os", "beta.kubernetes.io/arch"}, added
    assert all(labels.get(key) == value for key, value in expected["metadata"]["labels"].items()), labels
    assert FIELD_MANAGER not in {entry.get("manager") for entry in node["metadata"].get("managedFields") or ()}
    assert names.VIRTUAL_NODE_TAINT not in {t["key"] for t in node["spec"].get("taints") or []}
    assert names.LARGEST_SLOTS not in (node["metadata"].get("annotations") or {})
    assert "capacity" not in (node.get("status") or {})

    async def no_lease() -> bool:
        lease = await get_or_none(rome, LEASES, name, forge_node.NODE_LEASE_NAMESPACE)
        if lease is None:
            return True
        # A renewal landing just after our Node was deleted names that Node as owner, never the namesake, and
        # the garbage collector takes it away: a Lease owned by the namesake would be ours touching it.
        owners = {ref["uid"] for ref in lease["metadata"].get("ownerReferences") or ()}
        assert expected["metadata"]["uid"] not in owners
        return False

    await eventually(no_lease, timeout=30, message=f"no Lease of {name} in {forge_node.NODE_LEASE_NAMESPACE}")


def squatter(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"team": "storage"}}}


async def test_a_node_of_the_would_be_name_is_never_touched_and_is_reported(
    sites: dict[str, Site], rome: KubeClient, naples: KubeClient
) -> None:
    rome_id, naples_id = sites["rome"].cluster_id, sites["naples"].cluster_id
    fc_name = unique("squat")
    node_name = names.virtual_node_name(fc_name)
    tenant = names.tenant_namespace(naples_id)
    first = await rome.create(NODES, squatter(node_name))
    home = unique("squatted")
    twin = names.twin_namespace(home, home_cluster_id=rome_id)
    await rome.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": home}})
    try:
        async with peered_as(rome, naples, provider_id=naples_id, name=fc_name):
            reported = await expect_registered(rome, node_name, tenant=tenant, status="False")
            assert reported["reason"] == "NodeNameTaken"
            assert f"Node {node_name} already exists and is not this provider's virtual node" in reported["message"]
            event = await recorded_event(rome, namespace=tenant, reason="NodeNameTaken", about=node_name)
            assert event["type"] == "Warning"
            await expect_untouched(rome, first)

            # A pod bound to that name is the squatter's business: nothing goes to naples for it.
            await offloading.offload(rome, home, cluster_selector={names.REMOTE_CLUSTER_ID: naples_id})
            await offloading.wait_offloaded(rome, home, timeout=60)
            toleration = {"key": names.VIRTUAL_NODE_TAINT, "operator": "Exists", "effect": "NoExecute"}
            await rome.create(PODS, pod("bound", home, nodeName=node_name, tolerations=[toleration]))
            # An absence has no event to wait for: an owned node's reflector sends a pod well within this window.
            await asyncio.sleep(3)
            assert (await naples.list_all(SHADOW_PODS, namespace=twin))[0] == []
            await expect_untouched(rome, first)

            # The squatter goes: the virtual node registers, and the pod bound to it is sent.
            await rome.delete(NODES, node_name)
            await expect_registered(rome, node_name, tenant=tenant, status="True")
            assert forge_node.node_is_ours(await rome.get(NODES, node_name), provider_id=naples_id)

            async def sent() -> bool:
                return await get_or_none(naples, SHADOW_PODS, "bound", twin) is not None

            await eventually(sent, timeout=30, message="the bound pod sent to naples once the node is ours")
            await offloading.unoffload(rome, home, timeout=60)
    finally:
        with contextlib.suppress(offloading.OffloadingError):
            await offloading.unoffload(rome, home, timeout=60)
        with contextlib.suppress(NotFoundError):
            await rome.delete(NODES, node_name)
        await rome.delete(NAMESPACES, home)
    await expect_clean(rome, naples)


async def test_a_virtual_node_replaced_by_a_namesake_is_left_to_it_even_by_unpeer(
    sites: dict[str, Site], rome: KubeClient, naples: KubeClient
) -> None:
    naples_id = sites["naples"].cluster_id
    fc_name = unique("replaced")
    node_name = names.virtual_node_name(fc_name)
    tenant = names.tenant_namespace(naples_id)
    try:
        async with peered_as(rome, naples, provider_id=naples_id, name=fc_name):
            await expect_registered(rome, node_name, tenant=tenant, status="True")
            # Our Node deleted and a namesake created behind our back: the virtual kubelet's next apply names its
            # Node's UID, so the API server refuses it instead of letting it overwrite the namesake.
            while True:
                with contextlib.suppress(NotFoundError):
                    await rome.delete(NODES, node_name)
                try:
                    replacement = await rome.create(NODES, squatter(node_name))
                    break
                except ConflictError:
                    continue  # the virtual kubelet re-created its Node in between: again
            await expect_registered(rome, node_name, tenant=tenant, status="False")
            await expect_untouched(rome, replacement)
        await expect_untouched(rome, replacement)  # unpeer deletes our virtual node only
    finally:
        with contextlib.suppress(NotFoundError):
            await rome.delete(NODES, node_name)
    await expect_clean(rome, naples)


# -- NamespaceMap: bounds, reserved names, no hot loop -------------------------------------------------------


async def refusing_policy(client: KubeClient, *, name: str, prefix: str) -> None:
    """A ValidatingAdmissionPolicy refusing namespaces named ``<prefix>*``: how an admin's rule says 4xx."""
    match = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["namespaces"]}
    rule = {"expression": f"!object.metadata.name.startsWith('{prefix}')", "message": f"no {prefix}* here"}
    await client.create(
        POLICIES,
        {
            "apiVersion": POLICIES.api_version,
            "kind": POLICIES.kind,
            "metadata": {"name": name},
            "spec": {"failurePolicy": "Fail", "matchConstraints": {"resourceRules": [match]}, "validations": [rule]},
        },
    )
    await client.create(
        POLICY_BINDINGS,
        {
            "apiVersion": POLICY_BINDINGS.api_version,
            "kind": POLICY_BINDINGS.kind,
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        },
    )

    async def enforced() -> bool:
        probe = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"{prefix}probe"}}
        try:
            await client.create(NAMESPACES, probe, dry_run=True)
        except InvalidError:
            return True
        return False

    await eventually(enforced, timeout=30, message=f"policy {name} enforced")


async def policy_checks(client: KubeClient, policy: str) -> int:
    """How many times the API server evaluated ``policy``: every namespace creation naples' manager attempted."""
    metrics = (await client.request_bytes("GET", "/metrics")).decode()
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in metrics.splitlines()
        if line.startswith("apiserver_validating_admission_policy_check_total{") and f'policy="{policy}"' in line
    )


@contextlib.asynccontextmanager
async def reserving(site: Site, reserved: str) -> AsyncIterator[None]:
    """``site`` re-installed as its admin would, with ``liqoctl install --reserved-namespaces``; restored after."""
    command = [sys.executable, "-m", "liqo.cli.main", "install", f"--kubeconfig={site.cluster.kubeconfig}"]
    command += ["--identity-ttl=600", f"--reserved-namespaces={reserved}"]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    try:
        yield
    finally:
        async with site.client() as client:
            await install(
                client, InstallOptions(identity_ttl=600), progress=lambda _: None, launch=detect(client.server)
            )


async def expect_refused_at_write_time(as_consumer: KubeClient, consumer_id: str) -> None:
    """Oversize and malformed maps: refused by the provider's API server with a message naming the field."""
    oversize = {f"ns-{i}": f"ns-{i}" for i in range(MAX_NAMESPACE_MAPPINGS + 1)}
    with pytest.raises(InvalidError) as refused:
        await as_consumer.apply(NAMESPACE_MAPS, namespace_map(consumer_id, oversize))
    assert f"spec.mappings: Too many: {MAX_NAMESPACE_MAPPINGS + 1}" in refused.value.message
    with pytest.raises(InvalidError) as refused:
        await as_consumer.apply(NAMESPACE_MAPS, namespace_map(consumer_id, {"Not_A_Namespace": "x"}))
    assert "every home namespace (key) must be a namespace name" in refused.value.message
    with pytest.raises(InvalidError) as refused:
        await as_consumer.apply(NAMESPACE_MAPS, namespace_map(consumer_id, {"h": "x" * 64}))
    assert "spec.mappings.h: Too long" in refused.value.message


async def expect_no_retry(provider: KubeClient, policy: str, namespace_map: Obj) -> None:
    """The creation ``policy`` refused is not attempted again on a timer (it was, every 5 s), nor the map rewritten."""
    counts: list[int] = []

    async def settled() -> bool:  # the status write's own event may bring one more look
        counts.append(await policy_checks(provider, policy))
        return len(counts) > 1 and counts[-1] == counts[-2]

    await eventually(settled, timeout=30, message="no more creation attempts", every=1.0)
    await asyncio.sleep(12)  # an observation window: an absence has no event to wait for
    assert await policy_checks(provider, policy) == counts[-1]
    meta = namespace_map["metadata"]
    now = await provider.get(NAMESPACE_MAPS, meta["name"], namespace=meta["namespace"])
    assert now["metadata"]["resourceVersion"] == meta["resourceVersion"]


async def test_a_consumer_cannot_squat_reserved_names_and_a_refused_twin_is_not_retried(
    sites: dict[str, Site], rome: KubeClient, naples: KubeClient
) -> None:
    rome_id, naples_id = sites["rome"].cluster_id, sites["naples"].cluster_id
    cert_manager, team = unique("cert-manager"), unique("team")
    policy, blocked_home = unique("t-no-blocked"), unique("blocked")
    # Names naples gives (DefaultName): the refusals below are the reserved names' and the API server's.
    blocked, ok = (names.twin_namespace(home, home_cluster_id=rome_id) for home in (blocked_home, "h"))
    wanted = {
        "a": cert_manager,
        "b": f"{team}-payments",
        "c": "liqo-foo",
        "d": "kube-foo",
        "e": "default",
        "f": "liqo",
        blocked_home: blocked,
        "h": ok,
    }
    tenant = names.tenant_namespace(rome_id)
    async with reserving(sites["naples"], f"{cert_manager},{team}-*"):
        await refusing_policy(naples, name=policy, prefix="blocked-")
        await peering.peer(rome, naples, timeout=60)
        try:
            identity = await peering.peer_kubeconfig(rome, naples_id)
            # Rome's manager would rewrite (or delete) the map: out of the way, only naples' defences stand.
            async with (
                stopped(sites["rome"], MANAGER),
                KubeClient.from_kubeconfig_dict(identity, name="rome@naples") as as_rome,
            ):
                await as_rome.apply(NAMESPACE_MAPS, namespace_map(rome_id, wanted))

                async def reported() -> bool:
                    found = await naples.get(NAMESPACE_MAPS, rome_id, namespace=tenant)
                    status = (found.get("status") or {}).get("mappings") or {}
                    return set(status) == set(wanted) and status["h"]["phase"] == "Ready"

                await eventually(reported, timeout=30, message="naples reports every entry of rome's map")
                found = await naples.get(NAMESPACE_MAPS, rome_id, namespace=tenant)
                status = found["status"]["mappings"]
                for home in "abcdef":
                    assert status[home]["phase"] == "Conflict", status[home]
                    assert status[home]["message"] == f"namespace {wanted[home]} is reserved on this cluster"
                assert status[blocked_home]["phase"] == "Conflict"
                assert f"this cluster refused to create namespace {blocked}" in status[blocked_home]["message"]
                assert "no blocked-* here" in status[blocked_home]["message"]
                for name in (cert_manager, f"{team}-payments", "liqo-foo", "kube-foo", blocked):
                    assert await get_or_none(naples, NAMESPACES, name) is None, name
                for name in ("default", "liqo"):
                    assert names.REMOTE_CLUSTER_ID not in (await naples.get(NAMESPACES, name))["metadata"]["labels"]
                selector = f"{names.REMOTE_CLUSTER_ID}={rome_id},{names.ORIGIN_NAMESPACE}"
                assert [
                    ns["metadata"]["name"] for ns in (await naples.list_all(NAMESPACES, label_selector=selector))[0]
                ] == [ok]

                await expect_no_retry(naples, policy, found)
                await expect_refused_at_write_time(as_rome, rome_id)
                assert (await naples.get(NAMESPACE_MAPS, rome_id, namespace=tenant))["spec"]["mappings"] == wanted

                await as_rome.delete(NAMESPACE_MAPS, rome_id, namespace=tenant)

                async def map_gone() -> bool:
                    return await get_or_none(naples, NAMESPACE_MAPS, rome_id, tenant) is None

                await eventually(map_gone, timeout=60, message="the map (and with it the twin) gone")
                assert await get_or_none(naples, NAMESPACES, ok) is None
        finally:
            with contextlib.suppress(peering.PeeringError):
                await peering.unpeer(rome, naples_id, timeout=60)
            for resource in (POLICY_BINDINGS, POLICIES):
                with contextlib.suppress(NotFoundError):
                    await naples.delete(resource, policy)
    await expect_clean(rome, naples)


async def test_a_peer_cannot_name_its_twins_com_or_cert_manager_and_is_told_the_name_the_provider_gives(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient
) -> None:
    """A twin ``com`` would answer ``google.com`` for milan's pods (ndots 5); ``cert-manager``, a later install."""
    rome_id, milan_id = sites["rome"].cluster_id, sites["milan"].cluster_id
    home = unique("shop")
    wanted = {"com": "com", "cert-manager": "cert-manager", home: names.twin_namespace(home, home_cluster_id=rome_id)}
    tenant = names.tenant_namespace(rome_id)
    await peering.peer(rome, milan, timeout=60)
    try:
        identity = await peering.peer_kubeconfig(rome, milan_id)
        # Rome's manager would rewrite (or delete) the map: out of the way, only milan's defences stand.
        async with (
            stopped(sites["rome"], MANAGER),
            KubeClient.from_kubeconfig_dict(identity, name="rome@milan") as as_rome,
        ):
            await as_rome.apply(NAMESPACE_MAPS, namespace_map(rome_id, wanted))

            async def reported() -> bool:
                found = await milan.get(NAMESPACE_MAPS, rome_id, namespace=tenant)
                status = (found.get("status") or {}).get("mappings") or {}
                return set(status) == set(wanted) and status[home]["phase"] == "Ready"

            # The default-named twin made is the evidence that milan has judged the whole map.
            await eventually(reported, timeout=30, message="milan reports every entry of rome's map")
            status = (await milan.get(NAMESPACE_MAPS, rome_id, namespace=tenant))["status"]["mappings"]
            for chosen in ("com", "cert-manager"):
                assert status[chosen]["phase"] == "Conflict", status[chosen]
                given = names.twin_namespace(chosen, home_cluster_id=rome_id)
                assert status[chosen]["message"] == (
                    f"the twin of {chosen} is named {given} on this cluster; {chosen}, a name of the consumer's"
                    " choosing, is not allowed by this cluster's SharingPolicy for it (allowedTwinNames: none)"
                )
                assert await get_or_none(milan, NAMESPACES, chosen) is None, chosen
            selector = f"{names.REMOTE_CLUSTER_ID}={rome_id},{names.ORIGIN_NAMESPACE}"
            twins, _ = await milan.list_all(NAMESPACES, label_selector=selector)
            assert [ns["metadata"]["name"] for ns in twins] == [wanted[home]]

            await as_rome.delete(NAMESPACE_MAPS, rome_id, namespace=tenant)

            async def map_gone() -> bool:
                return await get_or_none(milan, NAMESPACE_MAPS, rome_id, tenant) is None

            await eventually(map_gone, timeout=60, message="the map (and with it the twin) gone")
    finally:
        with contextlib.suppress(peering.PeeringError):
            await peering.unpeer(rome, milan_id, timeout=60)
    await expect_clean(rome, milan)


# -- grace periods -------------------------------------------------------------------------------------------


async def test_malformed_grace_periods_never_jam_deletion(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    rome_id = sites["rome"].cluster_id
    malformed = {"superscript": "²", "negative": "-1", "exponent": "1e9", "huge": "1" * 40}
    identity = await peering.peer_kubeconfig(rome, sites["milan"].cluster_id)
    # Rome's virtual kubelet would delete ShadowPods without a home pod: out of the way.
    async with (
        stopped(sites["rome"], VIRTUAL_KUBELET),
        KubeClient.from_kubeconfig_dict(identity, name="rome@milan") as as_rome,
    ):
        for key in malformed:
            home: dict[str, Any] = pod(f"grace-{key}", offloaded.namespace)
            home["metadata"]["uid"] = unique("uid")
            await as_rome.create(
                SHADOW_PODS, forge_pods.shadow_pod(home, namespace=offloaded.twin, home_cluster_id=rome_id)
            )
        await running_pods(milan, offloaded.twin, len(malformed))
        for key, value in malformed.items():
            name = f"grace-{key}"
            annotation = {"metadata": {"annotations": {names.GRACE_PERIOD: value}}}
            await as_rome.patch(SHADOW_PODS, name, annotation, namespace=offloaded.twin)
            await as_rome.delete(SHADOW_PODS, name, namespace=offloaded.twin)

        async def gone() -> bool:
            shadows, _ = await milan.list_all(SHADOW_PODS, namespace=offloaded.twin)
            pods, _ = await milan.list_all(PODS, namespace=offloaded.twin)
            return not shadows and not pods

        await eventually(gone, timeout=30, message="every ShadowPod and its pod deleted despite its grace period")


# -- uninstall --purge -----------------------------------------------------------------------------------------


async def test_uninstall_purge_of_a_provider_removes_its_twins_and_everything_of_liqos(
    sites: dict[str, Site], rome: KubeClient, naples: KubeClient, not_peered: None
) -> None:
    rome_id, naples_id = sites["rome"].cluster_id, sites["naples"].cluster_id
    await peering.peer(rome, naples, timeout=60)
    home = unique("purged")
    twin = names.twin_namespace(home, home_cluster_id=rome_id)
    await rome.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": home}})
    try:
        await offloading.offload(
            rome, home, pod_offloading_strategy="Remote", cluster_selector={names.REMOTE_CLUSTER_ID: naples_id}
        )
        await offloading.wait_offloaded(rome, home, timeout=60)
        await rome.create(PODS, pod("kept", home))
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "consumers"}, "stringData": {"k": "v"}}
        await rome.create(SECRETS, secret, namespace=home)
        await running_pods(naples, twin, 1)

        async def reflected() -> bool:
            return await get_or_none(naples, SECRETS, "consumers", twin) is not None

        await eventually(reflected, timeout=30, message="rome's Secret copied into its twin on naples")

        await uninstall(naples, purge=True, progress=lambda _: None, launch=detect(naples.server))
        assert await get_or_none(naples, NAMESPACES, twin) is None
        ours = f"{names.MANAGED_BY}={names.MANAGED_BY_VALUE}"
        assert (await naples.list_all(NAMESPACES, label_selector=ours))[0] == []
        assert (await naples.list_all(CSRS, label_selector=ours))[0] == []
        assert [r for r in (await naples.list_all(CLUSTER_ROLES))[0] if r["metadata"]["name"].startswith("liqo-")] == []
        assert [c for c in (await naples.list_all(CRDS))[0] if c["metadata"]["name"].endswith(".liqo.io")] == []
    finally:
        await install(
            naples, InstallOptions(identity_ttl=600), progress=lambda _: None, launch=detect(naples.server)
        )  # as the other tests expect
        # Naples forgot rome (its record of rome went with the purge): rome finishes its own side.
        with contextlib.suppress(peering.PeeringError):
            await peering.unpeer(rome, naples_id, timeout=20, force=True)
        with contextlib.suppress(offloading.OffloadingError):
            await offloading.unoffload(rome, home, timeout=60)
        await rome.delete(NAMESPACES, home)
    await expect_clean(rome, naples)
