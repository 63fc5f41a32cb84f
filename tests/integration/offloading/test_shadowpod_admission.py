"""ShadowPod admission on the provider, attacked with the consumer's own identity (docs/security.md).

rome is peered with milan and has a namespace offloaded there; each attack writes a ShadowPod into rome's
twin on milan with rome's identity kubeconfig on milan, while rome's manager and virtual kubelet are
stopped (nothing of ours on the consumer side helps or interferes). Milan's API server calls milan's
ShadowPod webhook, which refuses with a message naming the field; afterwards neither a ShadowPod nor a pod
exists. Labels and annotations other components of a provider act on are not refused but left behind: the
real pod milan makes never carries them, and milan's Event names them. The rest: a ShadowPod outside a twin,
the twin's Pod Security Admission labels (Kubernetes itself refusing a pod there), the grace period cut to
the cap, and the webhook listener that only the API server can talk to.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from liqo.api import names
from liqo.api.components import MANAGER, VIRTUAL_KUBELET
from liqo.api.resources import SHADOW_PODS, SHARING_POLICIES
from liqo.install.installer import InstallOptions
from liqo.kube import kubeconfig
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import (
    EVENTS,
    NAMESPACES,
    NODES,
    PODS,
    VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS,
)
from liqo.localclusters import clusters
from liqo.localclusters.components import WEBHOOK_CLIENT
from liqo.localclusters.launch import host_processes
from liqo.offloading.registration import VALIDATE_PATH, VALIDATING_WEBHOOK_NAME
from liqo.offloading.twins import pod_security_labels
from liqo.peering import operations
from tests.integration.helpers import Offloaded, Site, pod, recorded_event, running, unique
from tests.shared import eventually

ENFORCE = "pod-security.kubernetes.io/enforce"


REQUESTS = {"requests": {"cpu": "100m", "memory": "64Mi"}}
"""What the twin's quota asks of every pod."""


def shadow_pod(name: str, namespace: str, consumer_id: str, **pod: Any) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "nginx", "resources": REQUESTS}], **pod}
    return {
        "apiVersion": SHADOW_PODS.api_version,
        "kind": SHADOW_PODS.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": names.peer_labels(consumer_id)},
        "spec": {"pod": spec, "homePodUID": "not-a-home-pod"},
    }


def container(**security_context: Any) -> list[Obj]:
    return [{"name": "c", "image": "nginx", "securityContext": security_context}]


RESTRICTED_BUT_ROOT = container(
    allowPrivilegeEscalation=False,
    runAsNonRoot=True,
    runAsUser=0,
    seccompProfile={"type": "RuntimeDefault"},
    capabilities={"drop": ["ALL"]},
)
HOSTNAME = "kubernetes.io/hostname"
METADATA = "169.254.169.254"
CROSS_NAMESPACE_TERM = {
    "labelSelector": {"matchLabels": {"component": "kube-apiserver"}},
    "namespaces": ["kube-system"],
    "topologyKey": HOSTNAME,
}
# (name, pod fields, the field the refusal must name); runAsUser 0 is tried under a restricted policy.
ATTACKS: list[tuple[str, Obj, str]] = [
    (
        "hostPath /",
        {
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "root", "mountPath": "/host"}]}],
        },
        "spec.pod.volumes[0].hostPath",
    ),
    (
        "hostPort",
        {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 80, "hostPort": 80}]}]},
        "spec.pod.containers[0].ports[0].hostPort",
    ),
    (
        "SYS_ADMIN",
        {"containers": container(capabilities={"add": ["SYS_ADMIN"]})},
        "spec.pod.containers[0].securityContext.capabilities.add",
    ),
    ("nodeName", {"nodeName": "NODE"}, "spec.pod.nodeName"),
    (
        "control-plane toleration",
        {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]},
        "spec.pod.tolerations[0]",
    ),
    ("system priority class", {"priorityClassName": "system-node-critical"}, "spec.pod.priorityClassName"),
    (
        "generic ephemeral volume",
        {
            "volumes": [
                {
                    "name": "scratch",
                    "ephemeral": {
                        "volumeClaimTemplate": {
                            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
                        }
                    },
                }
            ]
        },
        "spec.pod.volumes[0].ephemeral",
    ),
    (
        "custom-audience token",
        {
            "volumes": [
                {
                    "name": "vault",
                    "projected": {"sources": [{"serviceAccountToken": {"audience": "vault", "path": "token"}}]},
                }
            ]
        },
        "spec.pod.volumes[0].projected.sources[0].serviceAccountToken",
    ),
    (
        "nfs volume",
        {
            "volumes": [{"name": "share", "nfs": {"server": "10.0.0.1", "path": "/exports"}}],
            "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "share", "mountPath": "/share"}]}],
        },
        "spec.pod.volumes[0].nfs",
    ),
    (
        "inline csi volume",
        {
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "creds", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": True}},
            ]
        },
        "spec.pod.volumes[1].csi",
    ),
    (
        "affinity to pods of another namespace",
        {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [CROSS_NAMESPACE_TERM]}}},
        "spec.pod.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaces",
    ),
    (
        "anti-affinity to pods of every namespace",
        {
            "affinity": {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 100, "podAffinityTerm": {"topologyKey": HOSTNAME, "namespaceSelector": {}}}
                    ]
                }
            }
        },
        "spec.pod.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
        ".podAffinityTerm.namespaceSelector",
    ),
    (
        "liveness probe to the metadata service",
        {"containers": [{"name": "c", "image": "x", "livenessProbe": {"httpGet": {"host": METADATA, "port": 80}}}]},
        "spec.pod.containers[0].livenessProbe.httpGet.host",
    ),
    (
        "preStop hook to a neighbour of the node",
        {
            "initContainers": [
                {
                    "name": "side",
                    "image": "x",
                    "restartPolicy": "Always",
                    "lifecycle": {"preStop": {"tcpSocket": {"host": "10.0.0.1", "port": 22}}},
                }
            ]
        },
        "spec.pod.initContainers[0].lifecycle.preStop.tcpSocket.host",
    ),
    ("another scheduler", {"schedulerName": "my-scheduler"}, "spec.pod.schedulerName"),
]


@pytest.fixture
async def rome_as_peer(sites: dict[str, Site], rome: KubeClient, offloaded: Offloaded) -> AsyncIterator[KubeClient]:
    """rome's identity on milan, with rome's manager and virtual kubelet stopped meanwhile."""
    identity = await operations.peer_kubeconfig(rome, sites["milan"].cluster_id)
    components = [MANAGER, VIRTUAL_KUBELET]
    name = sites["rome"].cluster.name
    await asyncio.to_thread(clusters.set_components, name, components, enabled=False)
    try:
        async with KubeClient.from_kubeconfig_dict(identity, name="rome-on-milan") as client:
            yield client
    finally:
        await asyncio.to_thread(clusters.set_components, name, components, enabled=True)


async def nothing_left(milan: KubeClient, namespace: str, name: str) -> None:
    for resource in (SHADOW_PODS, PODS):
        with pytest.raises(NotFoundError):
            await milan.get(resource, name, namespace=namespace)


async def refused(peer: KubeClient, body: Obj) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await peer.create(SHADOW_PODS, body)
    return caught.value


async def pod_made(milan: KubeClient, namespace: str, name: str) -> Obj:
    """The pod milan makes for ShadowPod ``name``, once made."""
    made: list[Obj] = []

    async def found() -> bool:
        try:
            made.append(await milan.get(PODS, name, namespace=namespace))
        except NotFoundError:
            return False
        return True

    await eventually(found, timeout=30, message=f"milan making the pod of {name}")
    return made[-1]


async def released(peer: KubeClient, milan: KubeClient, namespace: str, name: str) -> None:
    """ShadowPod ``name`` deleted by the peer, and gone once milan has let it go."""
    await peer.delete(SHADOW_PODS, name, namespace=namespace)

    async def gone() -> bool:
        try:
            await milan.get(SHADOW_PODS, name, namespace=namespace)
        except NotFoundError:
            return True
        return False

    await eventually(gone, timeout=30, message=f"the ShadowPod {name} released by milan")


async def test_each_attack_with_the_consumers_identity_is_refused_naming_the_field(
    sites: dict[str, Site], milan: KubeClient, offloaded: Offloaded, rome_as_peer: KubeClient
) -> None:
    rome_id = sites["rome"].cluster_id
    nodes, _ = await milan.list_all(NODES)
    for attack, fields, field in ATTACKS:
        pod = fields | {"nodeName": nodes[0]["metadata"]["name"]} if "nodeName" in fields else fields
        name = unique("attack")
        error = await refused(rome_as_peer, shadow_pod(name, offloaded.twin, rome_id, **pod))
        assert error.status == 403, (attack, error)
        assert f'admission webhook "{VALIDATING_WEBHOOK_NAME}" denied the request' in error.message, attack
        assert field in error.message, (attack, error.message)
        await nothing_left(milan, offloaded.twin, name)

    # runAsUser 0 passes baseline; under a restricted policy for rome it is refused.
    async with restricted(milan, rome_id, offloaded.twin):
        name = unique("root")
        body = shadow_pod(name, offloaded.twin, rome_id, containers=RESTRICTED_BUT_ROOT)
        with pytest.raises(ApiError) as caught:
            await rome_as_peer.create(SHADOW_PODS, body, dry_run=True)
        assert "spec.pod.containers[0].securityContext.runAsUser" in caught.value.message
        assert "(restricted)" in caught.value.message
        error = await refused(rome_as_peer, body)
        assert "runAsUser" in error.message
        await nothing_left(milan, offloaded.twin, name)

        async def twin_restricted() -> bool:
            labels = (await milan.get(NAMESPACES, offloaded.twin))["metadata"].get("labels") or {}
            return labels.get(ENFORCE) == "restricted"

        await eventually(twin_restricted, timeout=30, message="the twin's PSA labels following the policy")


@contextlib.asynccontextmanager
async def restricted(milan: KubeClient, rome_id: str, twin: str) -> AsyncIterator[None]:
    """milan's SharingPolicy for rome at level restricted, from when milan's webhook applies it; after, the twin
    back to baseline."""
    policy: Obj = {
        "apiVersion": SHARING_POLICIES.api_version,
        "kind": SHARING_POLICIES.kind,
        "metadata": {"name": unique("restricted-rome")},
        "spec": {"action": "Share", "peers": [rome_id], "podSecurity": {"level": "restricted"}},
    }
    await milan.create(SHARING_POLICIES, policy)
    try:
        probe = shadow_pod(unique("probe"), twin, rome_id, containers=RESTRICTED_BUT_ROOT)

        async def applied() -> bool:
            try:
                await milan.create(SHADOW_PODS, probe, dry_run=True)
            except ApiError as exc:
                return "(restricted)" in exc.message
            return False

        await eventually(applied, timeout=30, message="the webhook applying rome's restricted policy")
        yield
    finally:
        await milan.delete(SHARING_POLICIES, policy["metadata"]["name"])

    async def twin_baseline() -> bool:
        labels = (await milan.get(NAMESPACES, twin))["metadata"].get("labels") or {}
        return all(labels.get(k) == v for k, v in pod_security_labels("baseline").items())

    await eventually(twin_baseline, timeout=30, message="the twin back to baseline once the policy is gone")


# (name, labels, annotations, the key as the Event names it): keys that other components of a provider act on
# when they find them on a pod. The ShadowPod carrying them is accepted; the real pod made of it never carries them.
METADATA_ATTACKS: list[tuple[str, dict[str, str], dict[str, str], str]] = [
    (
        "Multus network on a host interface",
        {},
        {"k8s.v1.cni.cncf.io/networks": "macvlan-host"},
        "metadata.annotations[k8s.v1.cni.cncf.io/networks]",
    ),
    (
        "Calico address of another pod",
        {},
        {"cni.projectcalico.org/ipAddrs": '["10.0.0.1"]'},
        "metadata.annotations[cni.projectcalico.org/ipAddrs]",
    ),
    (
        "Istio sidecar injection",
        {"sidecar.istio.io/inject": "true"},
        {},
        "metadata.labels[sidecar.istio.io/inject]",
    ),
    (
        "Istio sidecar with a host volume",
        {},
        {"sidecar.istio.io/userVolume": '{"host": {"hostPath": {"path": "/"}}}'},
        "metadata.annotations[sidecar.istio.io/userVolume]",
    ),
    (
        "Istio traffic around the mesh",
        {},
        {"traffic.sidecar.istio.io/excludeOutboundIPRanges": "0.0.0.0/0"},
        "metadata.annotations[traffic.sidecar.istio.io/excludeOutboundIPRanges]",
    ),
    ("Linkerd injection", {}, {"linkerd.io/inject": "enabled"}, "metadata.annotations[linkerd.io/inject]"),
    (
        "a provider node held against scale-down",
        {},
        {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"},
        "metadata.annotations[cluster-autoscaler.kubernetes.io/safe-to-evict]",
    ),
    (
        "Kubernetes' own keys",
        {},
        {"kubernetes.io/egress-bandwidth": "10G"},
        "metadata.annotations[kubernetes.io/egress-bandwidth]",
    ),
    ("a Helm chart's pod", {"helm.sh/chart": "shop-1.0.0"}, {}, "metadata.labels[helm.sh/chart]"),
    ("liqoctl test network's probe", {"liqo.io/netcheck": "remote"}, {}, "metadata.labels[liqo.io/netcheck]"),
]
SAME_NAMESPACE_ANTI_AFFINITY = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "nginx"}}, "topologyKey": HOSTNAME},
            }
        ]
    }
}
KEYS_NOT_COPIED = "KeysNotCopied"


def keys_of(obj: Obj) -> tuple[dict[str, str], dict[str, str]]:
    """``obj``'s labels and annotations."""
    meta = obj["metadata"]
    return meta.get("labels") or {}, meta.get("annotations") or {}


async def keys_not_copied(
    milan: KubeClient, namespace: str, name: str, *, naming: str, not_naming: str | None = None
) -> Obj:
    """milan's Event on ShadowPod ``name`` naming the keys it did not copy, once one names ``naming`` (and not
    ``not_naming``)."""
    found: list[Obj] = []

    async def recorded() -> bool:
        events, _ = await milan.list_all(EVENTS, namespace=namespace)
        found[:] = [
            e
            for e in events
            if e["reason"] == KEYS_NOT_COPIED
            and e["involvedObject"]["kind"] == SHADOW_PODS.kind
            and e["involvedObject"]["name"] == name
            and naming in e["message"]
            and (not_naming is None or not_naming not in e["message"])
        ]
        return bool(found)

    await eventually(recorded, timeout=30, message=f"milan's {KEYS_NOT_COPIED} Event on {name} naming {naming}")
    return found[-1]


async def made_again(milan: KubeClient, namespace: str, name: str, *, until: Any) -> Obj:
    """ShadowPod ``name``'s pod deleted by milan's admin (a drain) until the one milan makes again passes ``until``."""
    made: list[Obj] = []

    async def remade() -> bool:
        try:
            made.append(await milan.get(PODS, name, namespace=namespace))
        except NotFoundError:
            return False
        if until(made[-1]):
            return True
        if "deletionTimestamp" not in made[-1]["metadata"]:
            with contextlib.suppress(NotFoundError):
                await milan.delete(PODS, name, namespace=namespace, grace_period_seconds=0)
        return False

    await eventually(remade, timeout=30, message=f"milan making the pod of {name} again")
    return made[-1]


async def test_keys_the_provider_acts_on_never_reach_the_real_pod_from_the_peer_itself(
    sites: dict[str, Site], milan: KubeClient, offloaded: Offloaded, rome_as_peer: KubeClient
) -> None:
    """The ShadowPod is accepted and its pod runs; the pod carries the user's keys and the allowlist's, never the CNI,
    mesh, autoscaler or bandwidth keys (created or added later), and milan's Event names the keys it left behind."""
    rome_id = sites["rome"].cluster_id
    # kubectl create deployment nginx --image=nginx, restarted with kubectl rollout restart, anti-affine to itself,
    # packaged by Helm, carrying every key of the attacks above.
    name = unique("meta")
    body = shadow_pod(name, offloaded.twin, rome_id, affinity=SAME_NAMESPACE_ANTI_AFFINITY)
    user_labels = {"app": "nginx", "pod-template-hash": "7d9b8c6f5", "app.kubernetes.io/name": "shop"}
    body["metadata"]["labels"] |= user_labels
    body["metadata"]["annotations"] = {"kubectl.kubernetes.io/restartedAt": "2030-01-01T00:00:00Z"}
    for _, labels, notes, _ in METADATA_ATTACKS:
        body["metadata"]["labels"] |= labels
        body["metadata"]["annotations"] |= notes
    await rome_as_peer.create(SHADOW_PODS, body)
    try:
        made = await pod_made(milan, offloaded.twin, name)
        labels, annotations = keys_of(made)
        assert {k: labels.get(k) for k in ("app", "pod-template-hash")} == {
            "app": "nginx",
            "pod-template-hash": "7d9b8c6f5",
        }
        assert labels["app.kubernetes.io/name"] == "shop"
        assert annotations["kubectl.kubernetes.io/restartedAt"] == "2030-01-01T00:00:00Z"
        for attack, dropped_labels, dropped_notes, _ in METADATA_ATTACKS:
            assert not set(dropped_labels) & set(labels), (attack, labels)
            assert not set(dropped_notes) & set(annotations), (attack, annotations)
        event = await keys_not_copied(milan, offloaded.twin, name, naming="metadata.labels[helm.sh/chart]")
        for attack, _, _, key in METADATA_ATTACKS:
            assert key in event["message"], (attack, event["message"])
        assert "podSecurity.allowedLabelKeys" in event["message"]
        assert "podSecurity.allowedAnnotationKeys" in event["message"]

        async def runs() -> bool:
            return running(await milan.get(PODS, name, namespace=offloaded.twin))

        await eventually(runs, timeout=60, message=f"the pod of {name} Running on milan")

        # A key added later is stored, and never reaches the pod made again (after a drain, a deletion).
        istio = {"metadata": {"labels": {"sidecar.istio.io/inject": "true", "linkerd.io/inject": "enabled"}}}
        await rome_as_peer.patch(SHADOW_PODS, name, istio, namespace=offloaded.twin)
        stored = await milan.get(SHADOW_PODS, name, namespace=offloaded.twin)
        assert stored["metadata"]["labels"]["linkerd.io/inject"] == "enabled"
        # A label of the user's own vocabulary changes without the provider's say, and does reach it.
        await rome_as_peer.patch(SHADOW_PODS, name, {"metadata": {"labels": {"tier": "web"}}}, namespace=offloaded.twin)
        first = made["metadata"]["uid"]
        again = await made_again(milan, offloaded.twin, name, until=lambda p: p["metadata"]["uid"] != first)
        labels, _ = keys_of(again)
        assert labels["tier"] == "web"
        assert "linkerd.io/inject" not in labels
        assert "sidecar.istio.io/inject" not in labels
        await keys_not_copied(milan, offloaded.twin, name, naming="metadata.labels[linkerd.io/inject]")
    finally:
        await released(rome_as_peer, milan, offloaded.twin, name)


async def test_keys_the_providers_policy_lists_reach_the_real_pod_and_no_others(
    sites: dict[str, Site], milan: KubeClient, offloaded: Offloaded, rome_as_peer: KubeClient
) -> None:
    """milan's SharingPolicy for rome lists Prometheus' annotations and a domain of rome's: the pod made from then
    on carries those, still not Multus'; before, none of them."""
    rome_id = sites["rome"].cluster_id
    name = unique("scraped")
    scraped = shadow_pod(name, offloaded.twin, rome_id)
    scraped["metadata"]["labels"] |= {"example.com/team": "shop"}
    scraped["metadata"]["annotations"] = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9090",
        "k8s.v1.cni.cncf.io/networks": "macvlan-host",
    }
    await rome_as_peer.create(SHADOW_PODS, scraped)
    try:
        made = await pod_made(milan, offloaded.twin, name)
        labels, annotations = keys_of(made)
        assert "example.com/team" not in labels
        assert not {"prometheus.io/scrape", "prometheus.io/port", "k8s.v1.cni.cncf.io/networks"} & set(annotations)
        event = await keys_not_copied(milan, offloaded.twin, name, naming="metadata.labels[example.com/team]")
        assert "metadata.annotations[prometheus.io/scrape]" in event["message"]
        policy: Obj = {
            "apiVersion": SHARING_POLICIES.api_version,
            "kind": SHARING_POLICIES.kind,
            "metadata": {"name": unique("keys-rome")},
            "spec": {
                "action": "Share",
                "peers": [rome_id],
                "podSecurity": {
                    "allowedLabelKeys": ["example.com/team"],
                    "allowedAnnotationKeys": ["prometheus.io/*"],
                },
            },
        }
        await milan.create(SHARING_POLICIES, policy)
        try:
            made = await made_again(
                milan, offloaded.twin, name, until=lambda p: "example.com/team" in (p["metadata"].get("labels") or {})
            )
            labels, annotations = keys_of(made)
            assert labels["example.com/team"] == "shop"
            assert annotations["prometheus.io/scrape"] == "true"
            assert annotations["prometheus.io/port"] == "9090"
            assert "k8s.v1.cni.cncf.io/networks" not in annotations
            # The pod made under the policy: its Event names Multus' key, no longer Prometheus'.
            await keys_not_copied(
                milan,
                offloaded.twin,
                name,
                naming="metadata.annotations[k8s.v1.cni.cncf.io/networks]",
                not_naming="prometheus.io/scrape",
            )
        finally:
            await milan.delete(SHARING_POLICIES, policy["metadata"]["name"])
    finally:
        await released(rome_as_peer, milan, offloaded.twin, name)
    await nothing_left(milan, offloaded.twin, name)


async def test_a_helm_charts_home_pod_runs_and_is_told_the_keys_left_behind(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """End to end: a home pod labelled by Helm and by ``liqoctl test network`` runs in milan without those keys, and
    rome's virtual kubelet mirrors milan's Event naming them onto the home pod."""
    name = unique("charted")
    home = pod(name, offloaded.namespace)
    home["metadata"]["labels"] = {"app": "shop", "helm.sh/chart": "shop-1.0.0", "liqo.io/netcheck": "remote"}
    await rome.create(PODS, home)
    try:

        async def runs_at_home() -> bool:
            return running(await rome.get(PODS, name, namespace=offloaded.namespace))

        await eventually(runs_at_home, timeout=60, message=f"the home pod {name} Running in milan")
        labels, _ = keys_of(await milan.get(PODS, name, namespace=offloaded.twin))
        assert labels["app"] == "shop"
        assert not {"helm.sh/chart", "liqo.io/netcheck"} & set(labels)
        told: list[Obj] = []

        async def told_at_home() -> bool:
            events, _ = await rome.list_all(EVENTS, namespace=offloaded.namespace)
            told[:] = [
                e
                for e in events
                if e["reason"] == KEYS_NOT_COPIED
                and (e["involvedObject"]["kind"], e["involvedObject"]["name"]) == ("Pod", name)
            ]
            return bool(told)

        await eventually(told_at_home, timeout=30, message=f"milan's {KEYS_NOT_COPIED} Event on the home pod {name}")
        assert told[-1]["type"] == "Normal"
        for said in ("metadata.labels[helm.sh/chart]", "metadata.labels[liqo.io/netcheck]", "allowedLabelKeys"):
            assert said in told[-1]["message"], told[-1]["message"]
    finally:
        await rome.delete(PODS, name, namespace=offloaded.namespace)


async def test_grace_period_is_cut_to_the_cap_and_the_token_never_mounted(
    sites: dict[str, Site], milan: KubeClient, offloaded: Offloaded, rome_as_peer: KubeClient
) -> None:
    name = unique("grace")
    body = shadow_pod(
        name,
        offloaded.twin,
        sites["rome"].cluster_id,
        terminationGracePeriodSeconds=3600,
        automountServiceAccountToken=True,
    )
    await rome_as_peer.create(SHADOW_PODS, body)
    try:
        made = await pod_made(milan, offloaded.twin, name)
        assert made["spec"]["terminationGracePeriodSeconds"] == 120  # the default maxTermination...
        assert made["spec"]["automountServiceAccountToken"] is False
    finally:
        await released(rome_as_peer, milan, offloaded.twin, name)


async def test_a_shadow_pod_outside_a_twin_is_refused(
    sites: dict[str, Site], milan: KubeClient, offloaded: Offloaded, rome_as_peer: KubeClient
) -> None:
    rome_id = sites["rome"].cluster_id
    plain = unique("plain")
    await milan.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": plain}})
    try:
        # The peer cannot even write there.
        error = await refused(rome_as_peer, shadow_pod("x", plain, rome_id))
        assert error.status == 403
        # Written by someone else (who may write ShadowPods but not pods), labelled for rome: the webhook
        # is not called outside twins, and the controller refuses to make its pod.
        await milan.create(SHADOW_PODS, shadow_pod("x", plain, rome_id))
        found: list[Obj] = []

        async def marked_refused() -> bool:
            found.append(await milan.get(SHADOW_PODS, "x", namespace=plain))
            return (found[-1].get("status") or {}).get("phase") == "Refused"

        await eventually(marked_refused, timeout=30, message="the ShadowPod outside a twin marked Refused")
        assert "metadata.namespace" in found[-1]["status"]["message"]
        with pytest.raises(NotFoundError):
            await milan.get(PODS, "x", namespace=plain)
        assert (await recorded_event(milan, namespace=plain, reason="PodRefused"))["type"] == "Warning"
    finally:
        with contextlib.suppress(NotFoundError):
            await milan.delete(SHADOW_PODS, "x", namespace=plain)
        await milan.delete(NAMESPACES, plain)


async def test_the_twin_carries_psa_labels_and_kubernetes_refuses_a_baseline_violation(
    milan: KubeClient, offloaded: Offloaded
) -> None:
    labels = (await milan.get(NAMESPACES, offloaded.twin))["metadata"]["labels"]
    assert {k: labels.get(k) for k in pod_security_labels("baseline")} == pod_security_labels("baseline")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": unique("admin"), "namespace": offloaded.twin},
        "spec": {
            "containers": [{"name": "c", "image": "x", "volumeMounts": [{"name": "h", "mountPath": "/h"}]}],
            "volumes": [{"name": "h", "hostPath": {"path": "/"}}],
        },
    }
    with pytest.raises(ApiError) as caught:
        await milan.create(PODS, pod)  # milan's admin: PodSecurity admission, not liqo, refuses it
    assert caught.value.status == 403
    assert 'violates PodSecurity "baseline:latest"' in caught.value.message
    assert "hostPath" in caught.value.message


def _context(*, ca: bytes, cert: bytes | None = None, key: bytes | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cadata=ca.decode())
    if cert is not None and key is not None:
        kubeconfig.load_cert_chain(context, cert.decode(), key.decode())
    return context


async def _post(url: str, context: ssl.SSLContext) -> int:
    async with aiohttp.ClientSession() as session, session.post(url, data=b"{}", ssl=context) as response:
        return response.status


async def test_the_webhook_listener_answers_the_api_server_only(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    local = host_processes(sites["milan"].cluster.name, InstallOptions())
    url = f"{local.webhook_url}{VALIDATE_PATH}"
    pki = sites["milan"].cluster.dir.pki
    ca = (pki / "ca.crt").read_bytes()
    # The API server's webhook client identity gets an answer (400: the body is no AdmissionReview).
    api_server = _context(
        ca=ca, cert=(pki / f"{WEBHOOK_CLIENT}.crt").read_bytes(), key=(pki / f"{WEBHOOK_CLIENT}.key").read_bytes()
    )
    assert await _post(url, api_server) == 400
    # Nobody else does: no certificate, or the peer's identity (signed by milan's cluster CA).
    identity = await operations.peer_kubeconfig(rome, sites["milan"].cluster_id)
    user = identity["users"][0]["user"]
    peer = _context(
        ca=ca,
        cert=base64.b64decode(user["client-certificate-data"]),
        key=base64.b64decode(user["client-key-data"]),
    )
    for context in (_context(ca=ca), peer):
        with pytest.raises((aiohttp.ClientError, ssl.SSLError, ConnectionError)):
            await _post(url, context)
    # And the authentication listener, which peers reach, no longer serves the webhooks.
    auth = f"{local.auth_url}{VALIDATE_PATH}"
    assert await _post(auth, _context(ca=ca)) == 404


async def test_a_home_pod_milan_refuses_shows_the_refused_field_at_home(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """End to end: rome's virtual kubelet forges the ShadowPod, milan's webhook refuses it, rome shows why."""
    name = unique("hostpath")
    spec = pod(name, offloaded.namespace)["spec"]
    spec["containers"][0]["volumeMounts"] = [{"name": "root", "mountPath": "/host"}]
    spec["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    await rome.create(PODS, pod(name, offloaded.namespace, **spec))
    ready: list[Obj] = []

    async def refused_at_home() -> bool:
        home = await rome.get(PODS, name, namespace=offloaded.namespace)
        conditions = {c["type"]: c for c in (home.get("status") or {}).get("conditions") or []}
        ready.append(conditions.get("Ready") or {})
        return ready[-1].get("reason") == "ProviderRefused"

    await eventually(refused_at_home, timeout=60, message="the home pod Pending with milan's refusal")
    assert "spec.pod.volumes[0].hostPath: hostPath volumes are refused (baseline)" in ready[-1]["message"]

    async def event_at_home() -> bool:
        # The Event is recorded beside the status write, not before it: it may land a moment later.
        events, _ = await rome.list_all(EVENTS, namespace=offloaded.namespace)
        return any(e["reason"] == "ProviderRefused" and e["involvedObject"]["name"] == name for e in events)

    await eventually(event_at_home, timeout=15, message="a ProviderRefused Event on the home pod")
    await nothing_left(milan, offloaded.twin, name)
    await rome.delete(PODS, name, namespace=offloaded.namespace)


# -- a deletion is never judged: the grace period a home pod's deletion hands on -----------------------------

GRACE = 20
"""The home pods' deletion grace period below: shorter than their own, so rome's virtual kubelet writes it on the
ShadowPod before deleting it (``liqo.io/grace-period-seconds``), and the deadline for milan letting them go."""
NOT_PASSED_ON = "GracePeriodNotPassedOn"


async def home_pod_running_in_milan(rome: KubeClient, milan: KubeClient, offloaded: Offloaded, name: str) -> None:
    """A pod of rome's, allowed at baseline but not restricted (it may run as root), running in milan."""
    await rome.create(PODS, pod(name, offloaded.namespace, terminationGracePeriodSeconds=120))
    await pod_made(milan, offloaded.twin, name)


async def deleted_home_pod_goes_from_milan(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded, name: str
) -> None:
    """The home pod deleted with a short grace period: its ShadowPod and milan's pod gone within it, then itself."""
    await rome.delete(PODS, name, namespace=offloaded.namespace, grace_period_seconds=GRACE)

    async def gone(client: KubeClient, resource: Any, namespace: str) -> bool:
        try:
            await client.get(resource, name, namespace=namespace)
        except NotFoundError:
            return True
        return False

    async def gone_from_milan() -> bool:
        return all([await gone(milan, resource, offloaded.twin) for resource in (SHADOW_PODS, PODS)])

    message = f"milan's ShadowPod and pod {name} gone within the home pod's grace period"
    await eventually(gone_from_milan, timeout=GRACE, message=message)
    await eventually(
        lambda: gone(rome, PODS, offloaded.namespace), timeout=30, message=f"the home pod {name} finalised"
    )


async def test_a_pod_admitted_before_the_policy_tightened_goes_when_its_home_pod_goes(
    sites: dict[str, Site], rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """rome's virtual kubelet hands the grace period on (an update of the ShadowPod) under a policy refusing its pod."""
    name = unique("tightened")
    await home_pod_running_in_milan(rome, milan, offloaded, name)
    async with restricted(milan, sites["rome"].cluster_id, offloaded.twin):
        await deleted_home_pod_goes_from_milan(rome, milan, offloaded, name)
    events, _ = await rome.list_all(EVENTS, namespace=offloaded.namespace)
    assert not [e for e in events if e["reason"] == NOT_PASSED_ON and e["involvedObject"]["name"] == name]


async def test_the_grace_annotation_alone_passes_a_policy_that_refuses_the_pod(
    sites: dict[str, Site], milan: KubeClient, offloaded: Offloaded, rome_as_peer: KubeClient
) -> None:
    """With rome's own identity: liqo's bookkeeping and labels on a ShadowPod are not judged again; anything else
    still is."""
    rome_id = sites["rome"].cluster_id
    name = unique("bookkept")
    await rome_as_peer.create(SHADOW_PODS, shadow_pod(name, offloaded.twin, rome_id))
    try:
        await pod_made(milan, offloaded.twin, name)
        async with restricted(milan, rome_id, offloaded.twin):
            grace = {"metadata": {"annotations": {names.GRACE_PERIOD: "7"}}}
            await rome_as_peer.patch(SHADOW_PODS, name, grace, namespace=offloaded.twin)
            stored = await milan.get(SHADOW_PODS, name, namespace=offloaded.twin)
            assert stored["metadata"]["annotations"][names.GRACE_PERIOD] == "7"
            # Labels are not judged again either, whatever their keys: the pod made next is without those.
            labelled = {"metadata": {"labels": {"tier": "web", "sidecar.istio.io/inject": "true"}}}
            await rome_as_peer.patch(SHADOW_PODS, name, labelled, namespace=offloaded.twin)
            restart = {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": "2030-01-01T00:00:00Z"}}}
            with pytest.raises(ApiError) as caught:
                await rome_as_peer.patch(SHADOW_PODS, name, restart, namespace=offloaded.twin)
            assert caught.value.status == 403
            assert "runAsNonRoot" in caught.value.message
            assert "(restricted)" in caught.value.message
            stored = await milan.get(SHADOW_PODS, name, namespace=offloaded.twin)
            assert "kubectl.kubernetes.io/restartedAt" not in stored["metadata"]["annotations"]
    finally:
        await released(rome_as_peer, milan, offloaded.twin, name)


@contextlib.asynccontextmanager
async def grace_refused(milan: KubeClient, twin: str) -> AsyncIterator[str]:
    """milan's admin refuses any grace period on ShadowPods in ``twin`` (a ValidatingAdmissionPolicy of its own:
    what a provider of an earlier liqo, judging the pod whole on every update, does under a tightened policy)."""
    name = unique("no-grace")
    expression = f"!has(object.metadata.annotations) || !('{names.GRACE_PERIOD}' in object.metadata.annotations)"
    message = "milan takes no grace period from its peers"
    rule = {
        "apiGroups": [SHADOW_PODS.group],
        "apiVersions": ["*"],
        "operations": ["UPDATE"],
        "resources": [SHADOW_PODS.plural],
    }
    await milan.create(
        VALIDATING_ADMISSION_POLICIES,
        {
            "apiVersion": VALIDATING_ADMISSION_POLICIES.api_version,
            "kind": VALIDATING_ADMISSION_POLICIES.kind,
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [rule]},
                "validations": [{"expression": expression, "message": message}],
            },
        },
    )
    await milan.create(
        VALIDATING_ADMISSION_POLICY_BINDINGS,
        {
            "apiVersion": VALIDATING_ADMISSION_POLICY_BINDINGS.api_version,
            "kind": VALIDATING_ADMISSION_POLICY_BINDINGS.kind,
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": twin}}},
            },
        },
    )
    try:
        yield message
    finally:
        await milan.delete(VALIDATING_ADMISSION_POLICY_BINDINGS, name)
        await milan.delete(VALIDATING_ADMISSION_POLICIES, name)


async def test_a_grace_period_the_provider_refuses_never_keeps_the_pod_running_there(
    rome: KubeClient, milan: KubeClient, offloaded: Offloaded
) -> None:
    """The deletion is never judged: refused the grace period, rome's virtual kubelet deletes the ShadowPod anyway
    (milan's pod then ends with its own grace period) and says so on the home pod."""
    name = unique("refused-grace")
    await home_pod_running_in_milan(rome, milan, offloaded, name)
    async with grace_refused(milan, offloaded.twin) as refusal:
        grace = {"metadata": {"annotations": {names.GRACE_PERIOD: "1"}}}

        async def in_force() -> bool:
            try:
                await milan.patch(SHADOW_PODS, name, grace, namespace=offloaded.twin, dry_run=True)
            except ApiError as exc:
                return refusal in exc.message
            return False

        await eventually(in_force, timeout=30, message="milan's API server applying its admin's policy")
        await deleted_home_pod_goes_from_milan(rome, milan, offloaded, name)
    events, _ = await rome.list_all(EVENTS, namespace=offloaded.namespace)
    [event] = [e for e in events if e["reason"] == NOT_PASSED_ON and e["involvedObject"]["name"] == name]
    assert event["type"] == "Warning"
    assert refusal in event["message"]
    assert f"{GRACE}s" in event["message"]
