"""The provider's verdict on a peer's pod: allowed pieces pass, each forbidden piece is named, nothing raises.

The properties build pods from pieces the policy allows (any combination must pass), then add one
forbidden piece at a time (the verdict must name exactly its path), and throw arbitrary JSON at every level
(a peer writes it: the verdict must come back, with a violation where a type is wrong).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from liqo.api import names
from liqo.offloading.podsecurity import (
    Verdict,
    apply_resets,
    pod_verdict,
    shadow_pod_verdict,
)
from liqo.sharing.policy import PodSecurity
from liqo.virtualkubelet.forge import pods as forge_pods

Object = dict[str, Any]
ALLOWED_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "peers", "effect": "NoSchedule"}
BASELINE = PodSecurity(tolerations=(ALLOWED_TOLERATION,))
RESTRICTED = PodSecurity(level="restricted", tolerations=(ALLOWED_TOLERATION,))
STORAGE = PodSecurity(share_storage=True)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=12,
)


def restricted_context() -> Object:
    return {
        "allowPrivilegeEscalation": False,
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
        "capabilities": {"drop": ["ALL"]},
    }


ALLOWED_VOLUMES: list[Object] = [
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


@st.composite
def containers(draw: st.DrawFn, *, restricted: bool) -> Object:
    container: Object = {"name": draw(st.sampled_from(["web", "side"])), "image": "nginx"}
    if draw(st.booleans()):
        container["ports"] = [{"containerPort": draw(st.integers(1, 65535)), "hostPort": 0}]
    context: Object = restricted_context() if restricted else {}
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
    return container


@st.composite
def allowed_pods(draw: st.DrawFn, *, restricted: bool = False) -> Object:
    spec: Object = {"containers": draw(st.lists(containers(restricted=restricted), min_size=1, max_size=2))}
    if draw(st.booleans()):
        spec["initContainers"] = [draw(containers(restricted=restricted))]
    volumes = draw(st.lists(st.sampled_from(ALLOWED_VOLUMES), max_size=5, unique_by=lambda v: str(v["name"])))
    spec["volumes"] = copy.deepcopy(volumes)  # tests change the pods they draw
    if draw(st.booleans()):
        spec["tolerations"] = [dict(ALLOWED_TOLERATION)]
    if draw(st.booleans()):
        spec["nodeSelector"] = {"disk": "ssd"}
        spec["affinity"] = {"podAntiAffinity": {}}
    if draw(st.booleans()):
        spec["terminationGracePeriodSeconds"] = draw(st.integers(0, 120))
    if draw(st.booleans()):
        spec["serviceAccountName"] = draw(st.sampled_from(["", "default"]))
    if draw(st.booleans()):
        spec["hostNetwork"] = spec["hostPID"] = spec["hostIPC"] = False
    context: Object = {"sysctls": [{"name": "net.ipv4.tcp_syncookies", "value": "1"}]} if draw(st.booleans()) else {}
    if restricted and draw(st.booleans()):
        context["runAsNonRoot"] = True
    if context:
        spec["securityContext"] = context
    return spec


def paths(verdict: Verdict) -> set[str]:
    return {v.path for v in verdict.violations}


@given(allowed_pods())
def test_a_pod_of_allowed_pieces_passes_baseline(spec: Object) -> None:
    assert pod_verdict(spec, annotations={}, policy=BASELINE).violations == ()


@given(allowed_pods(restricted=True))
def test_a_pod_of_allowed_pieces_passes_restricted(spec: Object) -> None:
    assert pod_verdict(spec, annotations={}, policy=RESTRICTED).violations == ()


Mutation = Callable[[Object], None]


def container_context(index: int = 0) -> Callable[[Object], Object]:
    return lambda spec: spec["containers"][index].setdefault("securityContext", {})


def add_volume(volume: Object) -> Mutation:
    return lambda spec: spec.setdefault("volumes", []).append({"name": "extra", **volume})


def set_field(field: str, value: Any) -> Mutation:
    return lambda spec: spec.__setitem__(field, value)


def set_context(field: str, value: Any) -> Mutation:
    return lambda spec: container_context()(spec).__setitem__(field, value)


def set_pod_context(field: str, value: Any) -> Mutation:
    return lambda spec: spec.setdefault("securityContext", {}).__setitem__(field, value)


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


def resolved(path: str, spec: Object) -> str:
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
        verdict = pod_verdict(spec, annotations={}, policy=policy)
        assert resolved(path, spec) in paths(verdict), (name, verdict.violations)
        assert resolved(path, spec) in verdict.message()


@pytest.mark.parametrize(("name", "mutation", "path"), RESTRICTED_BREACHES, ids=[b[0] for b in RESTRICTED_BREACHES])
@given(data=st.data())
@settings(max_examples=25)
def test_restricted_refuses_what_baseline_allows(name: str, mutation: Mutation, path: str, data: st.DataObject) -> None:
    spec = copy.deepcopy(data.draw(allowed_pods(restricted=True)))
    mutation(spec)
    assert resolved(path, spec) in paths(pod_verdict(spec, annotations={}, policy=RESTRICTED)), name
    if name not in ("runAsUser 0", "pod runAsUser 0"):  # runAsUser 0 is baseline-legal, the rest too:
        assert pod_verdict(spec, annotations={}, policy=BASELINE).violations == (), name


@given(data=st.data(), kind=volume_types_off_the_list, source=volume_sources, share_storage=st.booleans())
def test_a_volume_of_any_type_off_the_list_is_refused_naming_its_path(
    data: st.DataObject, kind: str, source: Object, share_storage: bool
) -> None:
    """Volume types are an allowlist at every level: anything else, known to Kubernetes or not, is named."""
    for level in ("baseline", "restricted"):
        spec = copy.deepcopy(data.draw(allowed_pods(restricted=level == "restricted")))
        volumes = spec.setdefault("volumes", [])
        index = data.draw(st.integers(0, len(volumes)))
        volumes.insert(index, {"name": "extra", kind: source})
        policy = PodSecurity(level=level, share_storage=share_storage, tolerations=BASELINE.tolerations)
        verdict = pod_verdict(spec, annotations={}, policy=policy)
        assert paths(verdict) == {f"spec.pod.volumes[{index}].{kind}"}, verdict.violations
        assert f"spec.pod.volumes[{index}].{kind}" in verdict.message()


@given(data=st.data(), kind=st.text(min_size=1, max_size=20), source=volume_sources)
def test_a_projected_source_off_the_list_is_refused_naming_its_path(
    data: st.DataObject, kind: str, source: Object
) -> None:
    spec = copy.deepcopy(data.draw(allowed_pods()))
    sources: list[Object] = [{"configMap": {"name": "c"}}, {"secret": {"name": "s"}}]
    index = data.draw(st.integers(0, len(sources)))
    sources.insert(index, {kind: source})
    spec.setdefault("volumes", []).append({"name": "extra", "projected": {"sources": sources}})
    found = paths(pod_verdict(spec, annotations={}, policy=BASELINE))
    at = f"spec.pod.volumes[{len(spec['volumes']) - 1}].projected.sources[{index}].{kind}"
    assert found == (set() if kind in ("configMap", "secret", "downwardAPI") else {at})


def test_storage_is_allowed_when_the_policy_shares_it() -> None:
    spec = {
        "containers": [{"name": "a", "image": "x"}],
        "volumes": [
            {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "e", "ephemeral": {"volumeClaimTemplate": {}}},
        ],
    }
    assert pod_verdict(spec, annotations={}, policy=STORAGE).violations == ()
    assert paths(pod_verdict(spec, annotations={}, policy=PodSecurity())) == {
        "spec.pod.volumes[0].persistentVolumeClaim",
        "spec.pod.volumes[1].ephemeral",
    }


@pytest.mark.parametrize(
    ("profile", "refused"),
    [("unconfined", True), ("runtime/default", False), ("localhost/mine", False), ("", True)],
)
def test_apparmor_annotations_must_stay_confined(profile: str, refused: bool) -> None:
    key = "container.apparmor.security.beta.kubernetes.io/web"
    verdict = pod_verdict({"containers": [{"name": "web", "image": "x"}]}, annotations={key: profile}, policy=BASELINE)
    assert paths(verdict) == ({f"metadata.annotations[{key}]"} if refused else set())


@given(allowed_pods(), st.integers(0, 600), st.integers(0, 300))
def test_resets_cap_the_grace_period_unmount_the_token_and_are_idempotent(spec: Object, grace: int, cap: int) -> None:
    spec["terminationGracePeriodSeconds"] = grace
    spec["automountServiceAccountToken"] = True
    policy = PodSecurity(max_grace_seconds=cap, tolerations=BASELINE.tolerations)
    verdict = pod_verdict(spec, annotations={}, policy=policy)
    assert verdict.allowed
    secured = apply_resets(spec, verdict.resets)
    assert secured["automountServiceAccountToken"] is False
    assert secured["terminationGracePeriodSeconds"] == min(grace, cap)
    again = pod_verdict(secured, annotations={}, policy=policy)
    assert again.resets == ()
    assert again.allowed
    assert apply_resets(secured, verdict.resets) == secured


def test_an_absent_grace_period_counts_as_kubernetes_default() -> None:
    spec = {"containers": [{"name": "a", "image": "x"}], "automountServiceAccountToken": False}
    assert pod_verdict(spec, annotations={}, policy=PodSecurity(max_grace_seconds=30)).resets == ()
    short = pod_verdict(spec, annotations={}, policy=PodSecurity(max_grace_seconds=10))
    assert apply_resets(spec, short.resets)["terminationGracePeriodSeconds"] == 10


@given(json_values, json_values)
def test_the_verdict_never_raises_on_arbitrary_json(spec: Any, annotations: Any) -> None:
    for policy in (BASELINE, RESTRICTED):
        verdict = pod_verdict(spec, annotations=annotations, policy=policy)
        if not isinstance(spec, dict):
            assert not verdict.allowed


@given(allowed_pods(restricted=True), st.data())
@settings(max_examples=200)
def test_arbitrary_json_anywhere_in_a_pod_never_raises(spec: Object, data: st.DataObject) -> None:
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
        pod_verdict(spec, annotations=data.draw(json_values), policy=policy)


@pytest.mark.parametrize("value", ["true", 1, [True], {"on": True}])
def test_a_wrong_type_is_a_violation_not_an_exception(value: Any) -> None:
    spec = {"containers": [{"name": "a", "image": "x", "securityContext": {"privileged": value}}], "hostPID": value}
    assert paths(pod_verdict(spec, annotations={}, policy=BASELINE)) == {
        "spec.pod.hostPID",
        "spec.pod.containers[0].securityContext.privileged",
    }


def twin(consumer: str = "rome-id", **labels: str) -> Object:
    return {
        "metadata": {
            "name": "web-rome",
            "labels": {names.REMOTE_CLUSTER_ID: consumer, names.ORIGIN_NAMESPACE: "web"} | labels,
        }
    }


def shadow(pod: Any, **annotations: str) -> Object:
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


@given(json_values)
def test_a_shadow_pod_of_any_shape_gets_a_verdict(value: Any) -> None:
    shadow_pod_verdict(value, namespace=twin(), policy_of=lambda _: BASELINE)
    shadow_pod_verdict({"metadata": value, "spec": value}, namespace=twin(), policy_of=lambda _: BASELINE)


def test_the_shadow_pod_of_a_plain_deployment_pod_passes_baseline() -> None:
    """``kubectl create deployment nginx --image=nginx``, as the home API server stores its pods."""
    home_pod = {
        "metadata": {"name": "nginx-7d9b8-abcde", "namespace": "demo", "uid": "u1", "labels": {"app": "nginx"}},
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
    made = forge_pods.shadow_pod(home_pod, namespace="demo-rome", home_cluster_id="rome-id")
    verdict = shadow_pod_verdict(made, namespace=twin(), policy_of=lambda _: PodSecurity())
    assert verdict.violations == ()
    assert "runtimeClassName" not in made["spec"]["pod"]
