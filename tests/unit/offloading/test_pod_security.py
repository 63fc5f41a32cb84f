"""The provider's verdict on a peer's pod: allowed pieces pass, each forbidden piece is named, nothing raises.

The properties build pods from pieces the policy allows (any combination must pass), then add one
forbidden piece at a time (the verdict must name exactly its path), and throw arbitrary JSON at every level
(a peer writes it: the verdict must come back, with a violation where a type is wrong).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from liqo.api import names
from liqo.api.storage import CLAIM_RULES, ClassOffer, claim_refusals
from liqo.kube.objects import Obj
from liqo.offloading.podsecurity import (
    ANNOTATION_KEYS,
    LABEL_KEYS,
    Dropped,
    Verdict,
    apply_resets,
    key_accepted,
    pod_verdict,
    shadow_pod_verdict,
)
from liqo.offloading.shadowpods import pod_from_shadow
from liqo.sharing.policy import PodSecurity
from liqo.virtualkubelet.forge import pods as forge_pods

ALLOWED_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "peers", "effect": "NoSchedule"}
BASELINE = PodSecurity(tolerations=(ALLOWED_TOLERATION,))
RESTRICTED = PodSecurity(level="restricted", tolerations=(ALLOWED_TOLERATION,))
OFFERED = ClassOffer(name="local", capacity=Decimal(10 * 2**30), access_modes=("ReadWriteOnce", "ReadWriteOncePod"))
STORAGE = PodSecurity(storage=(OFFERED,))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)


def restricted_context() -> Obj:
    return {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": {"drop": ["ALL"]},
    }


ALLOWED_VOLUMES: list[Obj] = [
    {"name": "cfg", "configMap": {"name": "cfg"}},
    {"name": "sec", "secret": {"secretName": "s"}},
    {"name": "tmp", "emptyDir": {}},
    {"name": "ram", "emptyDir": {"medium": "Memory", "sizeLimit": "64Mi"}},
    {"name": "labels", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
    {
        "name": "info",
        "projected": {
            "sources": [{"downwardAPI": {"items": []}}, {"configMap": {"name": "c"}}, {"secret": {"name": "s"}}]
        },
    },
    {"name": "plain"},  # no source: the API server makes it an emptyDir
]
"""Every volume type a pod may use on a provider that shares no storage (docs/security.md)."""
VOLUME_TYPES = ("configMap", "secret", "emptyDir", "downwardAPI", "projected")
STORAGE_VOLUME_TYPES = ("persistentVolumeClaim", "ephemeral")
NOT_ALLOWED_VOLUME_TYPES = (
    "hostPath",
    "nfs",
    "iscsi",
    "fc",
    "csi",
    "gitRepo",
    "cephfs",
    "rbd",
    "glusterfs",
    "flocker",
    "azureFile",
    "azureDisk",
    "awsElasticBlockStore",
    "gcePersistentDisk",
    "portworxVolume",
    "quobyte",
    "scaleIO",
    "storageos",
    "vsphereVolume",
    "photonPersistentDisk",
    "flexVolume",
    "cinder",
    "image",
)
"""Kubernetes' other volume types: what the node mounts or fetches with its own identity and credentials."""
volume_types_off_the_list = st.sampled_from(NOT_ALLOWED_VOLUME_TYPES) | st.text(min_size=1, max_size=12).filter(
    lambda kind: kind not in (*VOLUME_TYPES, *STORAGE_VOLUME_TYPES, "name")
)
volume_sources = st.dictionaries(st.text(max_size=8), st.text(max_size=8) | st.booleans(), max_size=3)


TWIN = "web-rome"
"""The namespace the pods are judged in (their twin)."""
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HOOKS = ("postStart", "preStop")
handlers = st.sampled_from(
    [
        {"httpGet": {"path": "/healthz", "port": 8080}},
        {"httpGet": {"port": "http", "host": "", "httpHeaders": [{"name": "Host", "value": "example.com"}]}},
        {"tcpSocket": {"port": 5432}},
        {"exec": {"command": ["true"]}},
        {"grpc": {"port": 9000}},
        {"sleep": {"seconds": 1}},
    ]
)
"""Probes and lifecycle hooks on the pod's own address (an empty host is the pod's)."""


@st.composite
def containers(draw: st.DrawFn, *, restricted: bool) -> Obj:
    container: Obj = {"name": draw(st.sampled_from(["web", "side"])), "image": "nginx"}
    if draw(st.booleans()):
        container["ports"] = [{"containerPort": draw(st.integers(1, 65535)), "hostPort": 0}]
    context: Obj = restricted_context() if restricted else {}
    if draw(st.booleans()):
        allowed = ["NET_BIND_SERVICE"] if restricted else ["CHOWN", "NET_BIND_SERVICE", "KILL", "SYS_CHROOT"]
        context.setdefault("capabilities", {})["add"] = draw(st.lists(st.sampled_from(allowed), max_size=2))
    if draw(st.booleans()):
        context["privileged"] = False
        context["procMount"] = "Default"
        context["seLinuxOptions"] = {"type": draw(st.sampled_from(["container_t", "container_init_t"]))}
        context["appArmorProfile"] = {"type": draw(st.sampled_from(["RuntimeDefault", "Localhost"]))}
    if draw(st.booleans()):
        context["runAsUser"] = draw(st.integers(1, 65535))
    if context:
        container["securityContext"] = context
    for probe in draw(st.lists(st.sampled_from(PROBES), unique=True, max_size=3)):
        container[probe] = copy.deepcopy(draw(handlers))  # tests change the pods they draw
    hooks = draw(st.lists(st.sampled_from(HOOKS), unique=True, max_size=2))
    if hooks:
        container["lifecycle"] = {hook: copy.deepcopy(draw(handlers)) for hook in hooks}
    return container


@st.composite
def pod_affinity(draw: st.DrawFn) -> Obj:
    """Affinity to the pod's own namespace, as Deployments use it: no namespaces named, or only its own."""

    def term() -> Obj:
        found: Obj = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
        if draw(st.booleans()):
            found["namespaces"] = draw(st.sampled_from([[], [TWIN], [TWIN, TWIN]]))
        return found

    affinity: Obj = {"nodeAffinity": {}}
    for kind in draw(st.lists(st.sampled_from(["podAffinity", "podAntiAffinity"]), unique=True, max_size=2)):
        affinity[kind] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [term() for _ in range(draw(st.integers(0, 2)))],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "podAffinityTerm": term()} for _ in range(draw(st.integers(0, 2)))
            ],
        }
    return affinity


@st.composite
def allowed_pods(draw: st.DrawFn, *, restricted: bool = False) -> Obj:
    spec: Obj = {"containers": draw(st.lists(containers(restricted=restricted), min_size=1, max_size=2))}
    if draw(st.booleans()):
        spec["initContainers"] = [draw(containers(restricted=restricted))]
    volumes = draw(st.lists(st.sampled_from(ALLOWED_VOLUMES), max_size=5, unique_by=lambda v: str(v["name"])))
    spec["volumes"] = copy.deepcopy(volumes)  # tests change the pods they draw
    if draw(st.booleans()):
        spec["tolerations"] = [dict(ALLOWED_TOLERATION)]
    if draw(st.booleans()):
        spec["nodeSelector"] = {"disk": "ssd"}
        spec["affinity"] = draw(pod_affinity())
    if draw(st.booleans()):
        spec["terminationGracePeriodSeconds"] = draw(st.integers(0, 120))
    if draw(st.booleans()):
        spec["serviceAccountName"] = draw(st.sampled_from(["", "default"]))
    if draw(st.booleans()):
        spec["hostNetwork"] = spec["hostPID"] = spec["hostIPC"] = False
    context: Obj = {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]} if draw(st.booleans()) else {}
    if restricted and draw(st.booleans()):
        context["runAsNonRoot"] = True
    if context:
        spec["securityContext"] = context
    return spec


def judge(spec: Any, policy: PodSecurity, *, labels: Any = None, annotations: Any = None) -> Verdict:
    """The verdict on pod ``spec`` in :data:`TWIN`, with the ShadowPod's ``labels`` and ``annotations``."""
    return pod_verdict(spec, labels=labels, annotations=annotations, own_namespace=TWIN, policy=policy)


def paths(verdict: Verdict) -> set[str]:
    return {v.path for v in verdict.violations}


def dropped(verdict: Verdict) -> set[str]:
    return {str(d) for d in verdict.dropped}


@given(allowed_pods())
def test_a_pod_of_allowed_pieces_passes_baseline(spec: Obj) -> None:
    assert judge(spec, BASELINE).violations == ()


@given(allowed_pods(restricted=True))
def test_a_pod_of_allowed_pieces_passes_restricted(spec: Obj) -> None:
    assert judge(spec, RESTRICTED).violations == ()


Mutation = Callable[[Obj], None]


def container_context(index: int = 0) -> Callable[[Obj], Obj]:
    return lambda spec: spec["containers"][index].setdefault("securityContext", {})


def add_volume(volume: Obj) -> Mutation:
    return lambda spec: spec.setdefault("volumes", []).append({"name": "extra", **volume})


def set_field(field: str, value: Any) -> Mutation:
    return lambda spec: spec.__setitem__(field, value)


def set_context(field: str, value: Any) -> Mutation:
    return lambda spec: container_context()(spec).__setitem__(field, value)


def set_pod_context(field: str, value: Any) -> Mutation:
    return lambda spec: spec.setdefault("securityContext", {}).__setitem__(field, value)


def add_affinity_term(kind: str, term: Obj, *, preferred: bool = False) -> Mutation:
    """One more (required or preferred) term of pod ``kind`` affinity, its ``term`` fields over a plain one."""
    full = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname", **term}

    def mutate(spec: Obj) -> None:
        rules = spec.setdefault("affinity", {}).setdefault(kind, {})
        if preferred:
            rules.setdefault(PREFERRED, []).append({"weight": 10, "podAffinityTerm": full})
        else:
            rules.setdefault(REQUIRED, []).append(full)

    return mutate


def set_handler(at: str, action: str) -> Mutation:
    """The first container's probe or hook ``at`` (``lifecycle.preStop``) dialling the metadata service."""

    def mutate(spec: Obj) -> None:
        node = spec["containers"][0]
        *parents, leaf = at.split(".")
        for parent in parents:
            node = node.setdefault(parent, {})
        node[leaf] = {action: {"host": METADATA, "port": 80}}

    return mutate


METADATA = "169.254.169.254"
AFFINITY = "spec.pod.affinity"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
C0 = "spec.pod.containers[0]"
SC0 = f"{C0}.securityContext"
# (name, mutation, the path its violation must name); every mutation adds one forbidden piece.
BASELINE_BREACHES: list[tuple[str, Mutation, str]] = [
    ("hostNetwork", set_field("hostNetwork", True), "spec.pod.hostNetwork"),
    ("hostPID", set_field("hostPID", True), "spec.pod.hostPID"),
    ("hostIPC", set_field("hostIPC", True), "spec.pod.hostIPC"),
    ("hostNetwork as a string", set_field("hostNetwork", "false"), "spec.pod.hostNetwork"),
    ("privileged", set_context("privileged", True), f"{SC0}.privileged"),
    ("SYS_ADMIN", set_context("capabilities", {"add": ["SYS_ADMIN"]}), f"{SC0}.capabilities.add"),
    ("capabilities not a list", set_context("capabilities", {"add": "SYS_ADMIN"}), f"{SC0}.capabilities.add"),
    ("hostPath", add_volume({"hostPath": {"path": "/"}}), "spec.pod.volumes[-].hostPath"),
    (
        "hostPort",
        lambda spec: spec["containers"][0].setdefault("ports", []).append({"containerPort": 80, "hostPort": 80}),
        f"{C0}.ports[-].hostPort",
    ),
    ("seccomp Unconfined", set_context("seccompProfile", {"type": "Unconfined"}), f"{SC0}.seccompProfile.type"),
    (
        "pod seccomp Unconfined",
        set_pod_context("seccompProfile", {"type": "Unconfined"}),
        "spec.pod.securityContext.seccompProfile.type",
    ),
    ("AppArmor Unconfined", set_context("appArmorProfile", {"type": "Unconfined"}), f"{SC0}.appArmorProfile.type"),
    ("SELinux type", set_context("seLinuxOptions", {"type": "spc_t"}), f"{SC0}.seLinuxOptions.type"),
    (
        "SELinux user",
        set_pod_context("seLinuxOptions", {"user": "root"}),
        "spec.pod.securityContext.seLinuxOptions.user",
    ),
    ("procMount", set_context("procMount", "Unmasked"), f"{SC0}.procMount"),
    (
        "sysctl",
        set_pod_context("sysctls", [{"name": "kernel.msgmax", "value": "1"}]),
        "spec.pod.securityContext.sysctls[0].name",
    ),
    ("hostProcess", set_context("windowsOptions", {"hostProcess": True}), f"{SC0}.windowsOptions.hostProcess"),
    ("nodeName", set_field("nodeName", "control-plane"), "spec.pod.nodeName"),
    (
        "control-plane toleration",
        lambda spec: spec.setdefault("tolerations", []).append(
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
        ),
        "spec.pod.tolerations[-]",
    ),
    ("priorityClassName", set_field("priorityClassName", "system-node-critical"), "spec.pod.priorityClassName"),
    ("priority", set_field("priority", 2000001000), "spec.pod.priority"),
    ("preemptionPolicy", set_field("preemptionPolicy", "PreemptLowerPriority"), "spec.pod.preemptionPolicy"),
    ("runtimeClassName", set_field("runtimeClassName", "runc-privileged"), "spec.pod.runtimeClassName"),
    ("serviceAccountName", set_field("serviceAccountName", "admin"), "spec.pod.serviceAccountName"),
    ("serviceAccount", set_field("serviceAccount", "admin"), "spec.pod.serviceAccount"),
    (
        "custom-audience token",
        add_volume({"projected": {"sources": [{"serviceAccountToken": {"audience": "vault", "path": "t"}}]}}),
        "spec.pod.volumes[-].projected.sources[0].serviceAccountToken",
    ),
    (
        "pod certificate",
        add_volume({"projected": {"sources": [{"podCertificate": {"signerName": "x/y"}}]}}),
        "spec.pod.volumes[-].projected.sources[0].podCertificate",
    ),
    ("PVC", add_volume({"persistentVolumeClaim": {"claimName": "data"}}), "spec.pod.volumes[-].persistentVolumeClaim"),
    ("generic ephemeral", add_volume({"ephemeral": {"volumeClaimTemplate": {}}}), "spec.pod.volumes[-].ephemeral"),
    ("nfs volume", add_volume({"nfs": {"server": "x", "path": "/"}}), "spec.pod.volumes[-].nfs"),
    ("inline csi volume", add_volume({"csi": {"driver": "secrets-store.csi.k8s.io"}}), "spec.pod.volumes[-].csi"),
    ("gitRepo volume", add_volume({"gitRepo": {"repository": "https://x/y.git"}}), "spec.pod.volumes[-].gitRepo"),
    (
        "cluster trust bundle",
        add_volume({"projected": {"sources": [{"clusterTrustBundle": {"signerName": "x/y", "path": "ca.pem"}}]}}),
        "spec.pod.volumes[-].projected.sources[0].clusterTrustBundle",
    ),
    ("resourceClaims", set_field("resourceClaims", [{"name": "gpu"}]), "spec.pod.resourceClaims"),
    ("schedulingGates", set_field("schedulingGates", [{"name": "wait"}]), "spec.pod.schedulingGates"),
    ("ephemeralContainers", set_field("ephemeralContainers", [{"name": "debug"}]), "spec.pod.ephemeralContainers"),
    (
        "grace not an integer",
        set_field("terminationGracePeriodSeconds", "60"),
        "spec.pod.terminationGracePeriodSeconds",
    ),
    ("container not an object", lambda spec: spec["containers"].append("sh"), "spec.pod.containers[-]"),
    ("schedulerName", set_field("schedulerName", "my-scheduler"), "spec.pod.schedulerName"),
    (
        "affinity to another namespace",
        add_affinity_term("podAffinity", {"namespaces": ["kube-system"]}),
        f"{AFFINITY}.podAffinity.{REQUIRED}[-].namespaces",
    ),
    (
        "affinity to its own namespace and another",
        add_affinity_term("podAffinity", {"namespaces": [TWIN, "default"]}),
        f"{AFFINITY}.podAffinity.{REQUIRED}[-].namespaces",
    ),
    (
        "anti-affinity to every namespace",
        add_affinity_term("podAntiAffinity", {"namespaceSelector": {}}, preferred=True),
        f"{AFFINITY}.podAntiAffinity.{PREFERRED}[-].podAffinityTerm.namespaceSelector",
    ),
    (
        "anti-affinity to labelled namespaces",
        add_affinity_term("podAntiAffinity", {"namespaceSelector": {"matchLabels": {"team": "db"}}}),
        f"{AFFINITY}.podAntiAffinity.{REQUIRED}[-].namespaceSelector",
    ),
    (
        "affinity namespaces not a list",
        add_affinity_term("podAffinity", {"namespaces": "kube-system"}),
        f"{AFFINITY}.podAffinity.{REQUIRED}[-].namespaces",
    ),
    *[
        (f"{probe} {action} host", set_handler(probe, action), f"{C0}.{probe}.{action}.host")
        for probe in PROBES
        for action in ("httpGet", "tcpSocket")
    ],
    *[
        (f"{hook} {action} host", set_handler(f"lifecycle.{hook}", action), f"{C0}.lifecycle.{hook}.{action}.host")
        for hook in HOOKS
        for action in ("httpGet", "tcpSocket")
    ],
    (
        "init container startupProbe host",
        lambda spec: spec.setdefault("initContainers", []).append(
            {"name": "init", "image": "x", "startupProbe": {"httpGet": {"host": METADATA, "port": 80}}}
        ),
        "spec.pod.initContainers[-].startupProbe.httpGet.host",
    ),
]
RESTRICTED_BREACHES: list[tuple[str, Mutation, str]] = [
    ("runAsUser 0", set_context("runAsUser", 0), f"{SC0}.runAsUser"),
    ("pod runAsUser 0", set_pod_context("runAsUser", 0), "spec.pod.securityContext.runAsUser"),
    ("runAsNonRoot false", set_context("runAsNonRoot", False), f"{SC0}.runAsNonRoot"),
    ("privilege escalation", set_context("allowPrivilegeEscalation", True), f"{SC0}.allowPrivilegeEscalation"),
    ("no seccomp", lambda spec: container_context()(spec).pop("seccompProfile"), f"{SC0}.seccompProfile"),
    ("capabilities kept", set_context("capabilities", {"drop": ["NET_RAW"]}), f"{SC0}.capabilities.drop"),
    ("CHOWN added", set_context("capabilities", {"drop": ["ALL"], "add": ["CHOWN"]}), f"{SC0}.capabilities.add"),
]


def resolved(path: str, spec: Obj) -> str:
    """``[-]`` in an expected path stands for the last index of the list before it."""
    if "[-]" not in path:
        return path
    head, tail = path.split("[-]", 1)
    node: Any = spec
    for part in head.removeprefix("spec.pod.").replace("]", "").replace("[", ".").split("."):
        node = node[int(part)] if part.isdigit() else node[part]
    return f"{head}[{len(node) - 1}]{tail}"


@pytest.mark.parametrize(("name", "mutation", "path"), BASELINE_BREACHES, ids=[b[0] for b in BASELINE_BREACHES])
@given(data=st.data())
@settings(max_examples=25)
def test_one_forbidden_piece_is_named_by_its_path(
    name: str, mutation: Mutation, path: str, data: st.DataObject
) -> None:
    for policy, restricted in ((BASELINE, False), (RESTRICTED, True)):
        spec = copy.deepcopy(data.draw(allowed_pods(restricted=restricted)))
        mutation(spec)
        verdict = judge(spec, policy)
        assert resolved(path, spec) in paths(verdict), (name, verdict.violations)
        assert resolved(path, spec) in verdict.message()


@pytest.mark.parametrize(("name", "mutation", "path"), RESTRICTED_BREACHES, ids=[b[0] for b in RESTRICTED_BREACHES])
@given(data=st.data())
@settings(max_examples=25)
def test_restricted_refuses_what_baseline_allows(name: str, mutation: Mutation, path: str, data: st.DataObject) -> None:
    spec = copy.deepcopy(data.draw(allowed_pods(restricted=True)))
    mutation(spec)
    assert resolved(path, spec) in paths(judge(spec, RESTRICTED)), name
    if name not in ("runAsUser 0", "pod runAsUser 0"):  # runAsUser 0 is baseline-legal, the rest too:
        assert judge(spec, BASELINE).violations == (), name


@given(data=st.data(), kind=volume_types_off_the_list, source=volume_sources, share_storage=st.booleans())
def test_a_volume_of_any_type_off_the_list_is_refused_naming_its_path(
    data: st.DataObject, kind: str, source: Obj, share_storage: bool
) -> None:
    """Volume types are an allowlist at every level: anything else, known to Kubernetes or not, is named."""
    for level in ("baseline", "restricted"):
        spec = copy.deepcopy(data.draw(allowed_pods(restricted=level == "restricted")))
        volumes = spec.setdefault("volumes", [])
        index = data.draw(st.integers(0, len(volumes)))
        volumes.insert(index, {"name": "extra", kind: source})
        storage = (OFFERED,) if share_storage else ()
        policy = PodSecurity(level=level, storage=storage, tolerations=BASELINE.tolerations)
        verdict = judge(spec, policy)
        assert paths(verdict) == {f"spec.pod.volumes[{index}].{kind}"}, verdict.violations
        assert f"spec.pod.volumes[{index}].{kind}" in verdict.message()


@given(data=st.data(), kind=st.text(min_size=1, max_size=20), source=volume_sources)
def test_a_projected_source_off_the_list_is_refused_naming_its_path(
    data: st.DataObject, kind: str, source: Obj
) -> None:
    spec = copy.deepcopy(data.draw(allowed_pods()))
    sources: list[Obj] = [{"configMap": {"name": "c"}}, {"secret": {"name": "s"}}]
    index = data.draw(st.integers(0, len(sources)))
    sources.insert(index, {kind: source})
    spec.setdefault("volumes", []).append({"name": "extra", "projected": {"sources": sources}})
    found = paths(judge(spec, BASELINE))
    at = f"spec.pod.volumes[{len(spec['volumes']) - 1}].projected.sources[{index}].{kind}"
    assert found == (set() if kind in ("configMap", "secret", "downwardAPI") else {at})


TEMPLATE_SPEC: Obj = {
    "storageClassName": "local",
    "accessModes": ["ReadWriteOnce"],
    "resources": {"requests": {"storage": "1Gi"}},
}


def test_storage_is_allowed_when_the_policy_offers_a_class() -> None:
    spec = {
        "containers": [{"name": "a", "image": "x"}],
        "volumes": [
            {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": TEMPLATE_SPEC}}},
        ],
    }
    assert judge(spec, STORAGE).violations == ()
    assert paths(judge(spec, PodSecurity())) == {
        "spec.pod.volumes[0].persistentVolumeClaim",
        "spec.pod.volumes[1].ephemeral",
    }


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        ({"storageClassName": "fast"}, "storageClassName"),
        ({"storageClassName": None}, "storageClassName"),
        ({"accessModes": ["ReadWriteMany"]}, "accessModes"),
        ({"accessModes": []}, "accessModes"),
        ({"volumeName": "pv-of-the-provider"}, "volumeName"),
        ({"selector": {"matchLabels": {"team": "x"}}}, "selector"),
        ({"dataSource": {"kind": "PersistentVolumeClaim", "name": "theirs"}}, "dataSource"),
        ({"dataSourceRef": {"kind": "VolumeSnapshot", "name": "s"}}, "dataSourceRef"),
        ({"volumeAttributesClassName": "gold"}, "volumeAttributesClassName"),
    ],
)
def test_an_ephemeral_volume_template_is_judged_as_a_peers_claim(change: Obj, refused: str) -> None:
    """kube-controller-manager makes the claim with its own identity: the admission policy on peers' claims never
    sees it, so the ShadowPod's verdict applies the same rules to the template."""
    template = {"spec": {**TEMPLATE_SPEC, **change}}
    spec = {
        "containers": [{"name": "a", "image": "x"}],
        "volumes": [{"name": "e", "ephemeral": {"volumeClaimTemplate": template}}],
    }
    verdict = judge(spec, STORAGE)
    assert paths(verdict) == {f"spec.pod.volumes[0].ephemeral.volumeClaimTemplate.spec.{refused}"}
    assert CLAIM_RULES[refused] in verdict.message()


def test_an_ephemeral_volume_template_carries_no_annotation() -> None:
    template = {"metadata": {"annotations": {"volume.kubernetes.io/selected-node": "n1"}}, "spec": TEMPLATE_SPEC}
    spec = {
        "containers": [{"name": "a", "image": "x"}],
        "volumes": [{"name": "e", "ephemeral": {"volumeClaimTemplate": template}}],
    }
    assert paths(judge(spec, STORAGE)) == {"spec.pod.volumes[0].ephemeral.volumeClaimTemplate.metadata.annotations"}


@given(spec=st.dictionaries(st.sampled_from([*CLAIM_RULES, "resources", "volumeMode"]), json_values, max_size=6))
def test_claim_refusals_name_only_fields_of_the_claim_and_never_raise(spec: Obj) -> None:
    """Whatever a peer writes (any JSON), each refusal names a field it may not say, once."""
    refused = [field for field, _rule in claim_refusals(spec, storage=(OFFERED,))]
    assert len(refused) == len(set(refused))
    assert set(refused) <= set(CLAIM_RULES) - {"annotations"}


@pytest.mark.parametrize(
    ("profile", "refused"),
    [("unconfined", True), ("runtime/default", False), ("localhost/mine", False), ("", True)],
)
def test_apparmor_annotations_must_stay_confined(profile: str, refused: bool) -> None:
    key = "container.apparmor.security.beta.kubernetes.io/web"
    verdict = judge({"containers": [{"name": "web", "image": "x"}]}, BASELINE, annotations={key: profile})
    assert paths(verdict) == ({f"metadata.annotations[{key}]"} if refused else set())


# -- labels and annotations: the ShadowPod's the real pod gets, those it does not ----------------------------

KEY_NAMES = st.from_regex(r"\A[A-Za-z0-9]([-A-Za-z0-9_.]{0,20}[A-Za-z0-9])?\Z")
KEY_PREFIXES = st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?){0,3}\Z")
ACCEPTED_LABEL_KEYS = (
    "app.kubernetes.io/name",
    names.MANAGED_BY,
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "batch.kubernetes.io/job-name",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-completion-index",
    names.REMOTE_CLUSTER_ID,
    names.SHADOW_POD,
)
ACCEPTED_ANNOTATION_KEYS = (
    "kubectl.kubernetes.io/restartedAt",
    "kubectl.kubernetes.io/default-container",
    "batch.kubernetes.io/job-completion-index",
    names.GRACE_PERIOD,
    names.HOME_POD_UID,
)
ACCEPTED_PREFIXES = {"labels": ("app.kubernetes.io",), "annotations": ("kubectl.kubernetes.io",)}
"""What every provider accepts besides keys without a prefix (docs/security.md), written out by hand."""
KEYS_OTHERS_ACT_ON = (
    "k8s.v1.cni.cncf.io/networks",
    "cni.projectcalico.org/ipAddrs",
    "cni.projectcalico.org/ipv4pools",
    "cni.projectcalico.org/floatingIPs",
    "sidecar.istio.io/inject",
    "sidecar.istio.io/userVolume",
    "traffic.sidecar.istio.io/excludeOutboundIPRanges",
    "istio.io/rev",
    "linkerd.io/inject",
    "config.linkerd.io/skip-outbound-ports",
    "cluster-autoscaler.kubernetes.io/safe-to-evict",
    "kubernetes.io/egress-bandwidth",
    "seccomp.security.alpha.kubernetes.io/pod",
    "k8s.io/anything",
    "prometheus.io/scrape",
    names.TENANT,
    names.ORIGIN,
    "app.kubernetes.io.example.com/name",
)
"""Keys the Multus, Calico, Istio, Linkerd, the cluster autoscaler, the kubelet, Prometheus or liqo act on."""


def accepted_everywhere(where: str, key: str) -> bool:
    prefix, _, _ = key.rpartition("/")
    exact = ACCEPTED_LABEL_KEYS if where == "labels" else ACCEPTED_ANNOTATION_KEYS
    return not prefix or key in exact or prefix in ACCEPTED_PREFIXES[where]


keys_off_the_list = st.sampled_from(KEYS_OTHERS_ACT_ON) | st.builds("{}/{}".format, KEY_PREFIXES, KEY_NAMES)


@st.composite
def accepted_metadata(draw: st.DrawFn) -> tuple[Obj, Obj]:
    """Labels and annotations any provider accepts: the user's own keys, Kubernetes' and kubectl's, liqo's."""
    values = st.text(max_size=8)
    labels = draw(st.dictionaries(KEY_NAMES | st.sampled_from(ACCEPTED_LABEL_KEYS), values, max_size=4))
    annotations = draw(st.dictionaries(KEY_NAMES | st.sampled_from(ACCEPTED_ANNOTATION_KEYS), values, max_size=4))
    if draw(st.booleans()):
        annotations["container.apparmor.security.beta.kubernetes.io/web"] = "runtime/default"
    return labels, annotations


@given(allowed_pods(), accepted_metadata())
def test_the_keys_every_provider_accepts_pass(spec: Obj, metadata: tuple[Obj, Obj]) -> None:
    labels, annotations = metadata
    verdict = judge(spec, BASELINE, labels=labels, annotations=annotations)
    assert verdict.violations == ()
    assert verdict.dropped == ()


@given(
    allowed_pods(),
    accepted_metadata(),
    st.sampled_from(["labels", "annotations"]),
    keys_off_the_list,
    st.text(max_size=8),
)
def test_a_key_off_the_list_is_left_off_the_pod_naming_it_until_the_providers_policy_lists_it(
    spec: Obj, metadata: tuple[Obj, Obj], where: str, key: str, value: str
) -> None:
    """Keys other components act on never reach the provider's pod unless the provider says so (by key or prefix);
    the pod is not refused for them."""
    assume(not accepted_everywhere(where, key))
    labels, annotations = metadata
    (labels if where == "labels" else annotations)[key] = value
    verdict = judge(spec, BASELINE, labels=labels, annotations=annotations)
    assert verdict.violations == ()
    assert dropped(verdict) == {f"metadata.{where}[{key}]"}
    message = verdict.dropped_message()
    assert f"metadata.{where}[{key}]" in message
    assert f"podSecurity.allowed{where[:-1].capitalize()}Keys" in message
    other = "annotations" if where == "labels" else "labels"
    for listed in (key, f"{key.rpartition('/')[0]}/*"):
        allowing = keys_policy(where, ("example.org/x", listed))
        assert judge(spec, allowing, labels=labels, annotations=annotations) == Verdict(resets=verdict.resets)
        elsewhere = keys_policy(other, (listed,))
        assert dropped(judge(spec, elsewhere, labels=labels, annotations=annotations)) == {f"metadata.{where}[{key}]"}


def keyed(keys: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, str]]:
    return st.dictionaries(keys, st.text(max_size=4), max_size=6)


ANY_KEYS = KEY_NAMES | keys_off_the_list | st.sampled_from((*ACCEPTED_LABEL_KEYS, *ACCEPTED_ANNOTATION_KEYS))
PATTERNS = st.lists(st.sampled_from(["prometheus.io/*", "example.com/team", "sidecar.istio.io/inject"]), max_size=2)


@given(allowed_pods(), keyed(ANY_KEYS), keyed(ANY_KEYS), PATTERNS, PATTERNS)
def test_the_real_pod_never_carries_a_key_off_the_list_whatever_the_shadow_pod_says(
    spec: Obj,
    labels: dict[str, str],
    annotations: dict[str, str],
    label_patterns: list[str],
    annotation_patterns: list[str],
) -> None:
    """The pod made of an allowed ShadowPod gets every key without a prefix and every listed one, and no other."""
    policy = PodSecurity(
        tolerations=BASELINE.tolerations,
        allowed_label_keys=tuple(label_patterns),
        allowed_annotation_keys=tuple(annotation_patterns),
    )
    made = {
        "metadata": {"name": "p", "namespace": TWIN, "uid": "s1", "labels": labels, "annotations": annotations},
        "spec": {"pod": spec, "homePodUID": "u1"},
    }
    verdict = shadow_pod_verdict(made, namespace=twin(), policy_of=lambda _: policy)
    assert verdict.allowed
    pod = pod_from_shadow(made, verdict=verdict)["metadata"]
    for field, asked, accepted in (
        ("labels", labels, (*LABEL_KEYS, *label_patterns)),
        ("annotations", annotations, (*ANNOTATION_KEYS, *annotation_patterns)),
    ):
        assert all(key_accepted(key, accepted) for key in pod[field]), pod[field]
        mine = {names.SHADOW_POD, names.HOME_POD_UID}  # set by the provider, whatever the ShadowPod says
        assert {k: v for k, v in asked.items() if key_accepted(k, accepted) and k not in mine}.items() <= pod[
            field
        ].items()
        assert {k for k in asked if "/" not in k} <= set(pod[field])
        assert {d for d in verdict.dropped if d.field == field} == {
            Dropped(field, k) for k in asked if not key_accepted(k, accepted)
        }


def keys_policy(where: str, patterns: tuple[str, ...]) -> PodSecurity:
    """The test's baseline policy, accepting ``patterns`` as label or annotation keys."""
    if where == "labels":
        return PodSecurity(tolerations=BASELINE.tolerations, allowed_label_keys=patterns)
    return PodSecurity(tolerations=BASELINE.tolerations, allowed_annotation_keys=patterns)


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        ("prometheus.io/scrape", True),
        ("prometheus.io/port", True),
        ("x.prometheus.io/scrape", False),
        ("prometheus.iox/scrape", False),
        ("example.com/team", True),
        ("example.com/team2", False),
        ("example.com/tea", False),
    ],
)
def test_a_pattern_covers_its_key_or_its_own_prefix_only(key: str, allowed: bool) -> None:
    policy = PodSecurity(allowed_annotation_keys=("prometheus.io/*", "example.com/team"))
    verdict = judge({"containers": [{"name": "c", "image": "x"}]}, policy, annotations={key: "1"})
    assert verdict.allowed
    assert (not verdict.dropped) is allowed


@pytest.mark.parametrize("value", ["app=web", ["app"], 1])
def test_labels_that_are_no_object_are_a_violation(value: Any) -> None:
    assert paths(judge({"containers": [{"name": "c", "image": "x"}]}, BASELINE, labels=value)) == {"metadata.labels"}


@pytest.mark.parametrize("value", [1, None, ["x"], {"a": "b"}, True])
def test_a_label_or_annotation_value_that_is_no_string_is_a_violation(value: Any) -> None:
    spec = {"containers": [{"name": "c", "image": "x"}]}
    verdict = judge(spec, BASELINE, labels={"app": value}, annotations={"prometheus.io/port": value})
    assert paths(verdict) == {"metadata.labels[app]", "metadata.annotations[prometheus.io/port]"}


def test_a_key_the_policy_no_longer_lists_is_left_behind_never_refused() -> None:
    """A key a policy copied when the ShadowPod was made is only left off the pod made after the policy lost it.

    The virtual kubelet writes a grace period before a deletion: nothing of the keys refuses it. The pod is
    judged whole at every creation, by the ShadowPod controller.
    """
    pod = {"containers": [{"name": "c", "image": "x"}]}
    listing = PodSecurity(allowed_annotation_keys=("prometheus.io/*",))
    admitted = shadow(pod, **{"prometheus.io/scrape": "true"})
    assert shadow_pod_verdict(admitted, namespace=twin(), policy_of=lambda _: listing) == Verdict(
        resets=judge(pod, listing).resets
    )
    tightened = PodSecurity()
    graced = shadow(pod, **{"prometheus.io/scrape": "true", names.GRACE_PERIOD: "5"})
    verdict = shadow_pod_verdict(graced, namespace=twin(), policy_of=lambda _: tightened)
    assert verdict.allowed
    assert dropped(verdict) == {"metadata.annotations[prometheus.io/scrape]"}
    labelled = copy.deepcopy(graced)
    labelled["metadata"]["labels"] = {"sidecar.istio.io/inject": "true", "linkerd.io/inject": "enabled"}
    verdict = shadow_pod_verdict(labelled, namespace=twin(), policy_of=lambda _: tightened)
    assert verdict.allowed
    assert dropped(verdict) == {
        "metadata.annotations[prometheus.io/scrape]",
        "metadata.labels[sidecar.istio.io/inject]",
        "metadata.labels[linkerd.io/inject]",
    }
    # The pod is judged whole all the same.
    hostile = shadow({**pod, "hostPID": True}, **{"prometheus.io/scrape": "true"})
    verdict = shadow_pod_verdict(hostile, namespace=twin(), policy_of=lambda _: tightened)
    assert paths(verdict) == {"spec.pod.hostPID"}


def test_a_helm_charts_pod_and_liqoctls_network_probe_run_without_their_keys() -> None:
    """``helm.sh/chart`` (every Bitnami chart's pods) and ``liqo.io/netcheck`` (``liqoctl test network``'s probe
    pods): allowed, their pods made without those keys, with the others."""
    made = shadow({"containers": [{"name": "c", "image": "x"}]}, **{"prometheus.io/scrape": "true"})
    made["metadata"] |= {"namespace": TWIN, "uid": "s1"}
    made["metadata"]["labels"] = {
        "app.kubernetes.io/name": "shop",
        "app": "shop",
        "helm.sh/chart": "shop-1.0.0",
        "liqo.io/netcheck": "remote",
    }
    verdict = shadow_pod_verdict(made, namespace=twin(), policy_of=lambda _: PodSecurity())
    assert verdict.allowed
    assert dropped(verdict) == {
        "metadata.labels[helm.sh/chart]",
        "metadata.labels[liqo.io/netcheck]",
        "metadata.annotations[prometheus.io/scrape]",
    }
    pod = pod_from_shadow(made, verdict=verdict)["metadata"]
    assert pod["labels"] == {"app.kubernetes.io/name": "shop", "app": "shop", names.SHADOW_POD: "p"}
    assert pod["annotations"] == {names.HOME_POD_UID: ""}
    assert verdict.dropped_message().startswith(
        "not copied onto the pod: metadata.labels[helm.sh/chart], metadata.labels[liqo.io/netcheck],"
        " metadata.annotations[prometheus.io/scrape]"
    )
    assert "podSecurity.allowedAnnotationKeys and podSecurity.allowedLabelKeys" in verdict.dropped_message()


@given(allowed_pods(), st.integers(0, 600), st.integers(0, 300))
def test_resets_cap_the_grace_period_unmount_the_token_and_are_idempotent(spec: Obj, grace: int, cap: int) -> None:
    spec["terminationGracePeriodSeconds"] = grace
    spec["automountServiceAccountToken"] = True
    policy = PodSecurity(max_grace_seconds=cap, tolerations=BASELINE.tolerations)
    verdict = judge(spec, policy)
    assert verdict.allowed
    secured = apply_resets(spec, verdict.resets)
    assert secured["automountServiceAccountToken"] is False
    assert secured["terminationGracePeriodSeconds"] == min(grace, cap)
    again = judge(secured, policy)
    assert again.resets == ()
    assert again.allowed
    assert apply_resets(secured, verdict.resets) == secured


def test_an_absent_grace_period_counts_as_kubernetes_default() -> None:
    spec = {"containers": [{"name": "a", "image": "x"}], "automountServiceAccountToken": False}
    assert judge(spec, PodSecurity(max_grace_seconds=30)).resets == ()
    short = judge(spec, PodSecurity(max_grace_seconds=10))
    assert apply_resets(spec, short.resets)["terminationGracePeriodSeconds"] == 10


@given(json_values, json_values, json_values)
def test_the_verdict_never_raises_on_arbitrary_json(spec: Any, labels: Any, annotations: Any) -> None:
    for policy in (BASELINE, RESTRICTED):
        verdict = judge(spec, policy, labels=labels, annotations=annotations)
        if not isinstance(spec, dict):
            assert not verdict.allowed


@given(allowed_pods(restricted=True), st.data())
@settings(max_examples=200)
def test_arbitrary_json_anywhere_in_a_pod_never_raises(spec: Obj, data: st.DataObject) -> None:
    """Replace one value somewhere in an allowed pod by arbitrary JSON: a verdict always comes back."""
    spots: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            spots.extend((node, key) for key in node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            spots.extend((node, index) for index in range(len(node)))
            for value in node:
                walk(value)

    walk(spec)
    parent, key = data.draw(st.sampled_from(spots))
    parent[key] = data.draw(json_values)
    for policy in (BASELINE, RESTRICTED):
        judge(spec, policy, labels=data.draw(json_values), annotations=data.draw(json_values))


@pytest.mark.parametrize("value", ["true", 1, [True], {"on": True}])
def test_a_wrong_type_is_a_violation_not_an_exception(value: Any) -> None:
    spec = {"containers": [{"name": "a", "image": "x", "securityContext": {"privileged": value}}], "hostPID": value}
    assert paths(judge(spec, BASELINE)) == {
        "spec.pod.hostPID",
        "spec.pod.containers[0].securityContext.privileged",
    }


def twin(consumer: str = "rome-id", **labels: str) -> Obj:
    return {
        "metadata": {
            "name": "web-rome",
            "labels": {names.REMOTE_CLUSTER_ID: consumer, names.ORIGIN_NAMESPACE: "web"} | labels,
        }
    }


def shadow(pod: Any, **annotations: str) -> Obj:
    return {"metadata": {"name": "p", "annotations": annotations}, "spec": {"pod": pod}}


def test_the_consumer_is_the_namespaces_and_outside_twins_nothing_passes() -> None:
    asked: list[str] = []

    def policy_of(consumer: str) -> PodSecurity:
        asked.append(consumer)
        return PodSecurity(level="restricted")

    plain = shadow({"containers": [{"name": "a", "image": "x"}]})
    plain["metadata"]["labels"] = {names.REMOTE_CLUSTER_ID: "someone-else"}  # the consumer's word: ignored
    assert not shadow_pod_verdict(plain, namespace=twin(), policy_of=policy_of).allowed  # restricted for rome
    assert asked == ["rome-id"]
    not_twin = {"metadata": {"name": "kube-system", "labels": {names.REMOTE_CLUSTER_ID: "rome-id"}}}
    for namespace in (None, not_twin, {"metadata": {"name": "default"}}):
        verdict = shadow_pod_verdict(plain, namespace=namespace, policy_of=policy_of)
        assert paths(verdict) == {"metadata.namespace"}
    assert asked == ["rome-id"]


@given(json_values, json_values)
def test_a_shadow_pod_of_any_shape_gets_a_verdict(value: Any, other: Any) -> None:
    shadow_pod_verdict(value, namespace=twin(), policy_of=lambda _: BASELINE)
    shadow_pod_verdict({"metadata": value, "spec": value}, namespace=twin(), policy_of=lambda _: BASELINE)
    for labels, notes in ((value, other), (other, value)):
        made = {"metadata": {"labels": labels, "annotations": notes}, "spec": {"pod": {}}}
        verdict = shadow_pod_verdict(made, namespace=twin(), policy_of=lambda _: BASELINE)
        if verdict.allowed:
            made["metadata"] |= {"name": "p", "namespace": TWIN, "uid": "s1"}
            meta = pod_from_shadow(made, verdict=verdict)["metadata"]
            assert all(isinstance(v, str) for field in ("labels", "annotations") for v in meta[field].values())


def test_the_shadow_pod_of_a_plain_deployment_pod_passes_baseline() -> None:
    """``kubectl create deployment nginx --image=nginx``, as the home API server stores its pods.

    After a ``kubectl rollout restart``, and as the virtual kubelet marks its ShadowPod on deletion.
    """
    home_pod = {
        "metadata": {
            "name": "nginx-7d9b8c6f5-abcde",
            "namespace": "demo",
            "uid": "u1",
            "labels": {"app": "nginx", "pod-template-hash": "7d9b8c6f5"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2030-01-01T00:00:00Z"},
        },
        "spec": {
            "containers": [
                {
                    "name": "nginx",
                    "image": "nginx",
                    "imagePullPolicy": "Always",
                    "resources": {},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "volumeMounts": [
                        {
                            "name": "kube-api-access-x1",
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "nodeName": "liqo-milan",
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "runtimeClassName": "home-runc",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": "default",
            "serviceAccountName": "default",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                },
                {"key": names.VIRTUAL_NODE_TAINT, "operator": "Equal", "value": "true", "effect": "NoExecute"},
            ],
            "volumes": [
                {
                    "name": "kube-api-access-x1",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        ],
                    },
                }
            ],
        },
    }
    made = forge_pods.shadow_pod(home_pod, namespace="web-rome", home_cluster_id="rome-id")
    verdict = shadow_pod_verdict(made, namespace=twin(), policy_of=lambda _: PodSecurity())
    assert verdict.violations == ()
    assert verdict.dropped == ()  # every key of a plain Deployment's pod reaches the provider's
    assert "runtimeClassName" not in made["spec"]["pod"]
    assert "schedulerName" not in made["spec"]["pod"]  # the provider's default scheduler places it
    assert made["metadata"]["labels"]["pod-template-hash"] == "7d9b8c6f5"
    deleted = copy.deepcopy(made)
    deleted["metadata"]["annotations"][names.GRACE_PERIOD] = "5"
    assert shadow_pod_verdict(deleted, namespace=twin(), policy_of=lambda _: PodSecurity()).allowed
