"""What a consumer's pod may do on this provider: the verdict on a ShadowPod, what the provider resets or leaves off.

A ShadowPod is written by a peer, and the manager turns it into a real pod with its own cluster-wide right to
create pods: whatever the ShadowPod asks for, the provider grants, unless it is refused here first. So the
pod is judged by the provider alone, from the peer's :class:`SecurityPolicy` (a SharingPolicy's
``podSecurity``), in two families of rules (docs/security.md, "ShadowPod admission"):

- the Pod Security Standards, as Kubernetes defines them: *baseline* always (no host namespaces, privileged
  containers, added capabilities beyond the runtime's default set, hostPath volumes, host ports, unconfined
  AppArmor or seccomp, custom SELinux user/role/type, unmasked ``/proc``, unsafe sysctls, Windows host
  processes), *restricted* when the policy says so (no privilege escalation, non-root, a seccomp profile,
  every capability dropped but ``NET_BIND_SERVICE``);
- volume types, at every level, from an allowlist (:data:`VOLUME_TYPES`): baseline lets a pod mount NFS,
  iSCSI, Ceph or inline CSI volumes, which the node mounts with its own network identity and credentials
  (its address is what an NFS export trusts), and restricted still allows inline CSI; a peer's pod gets only
  what is made of its own objects in its twin, or of the pod itself;
- the provider's business, which a pod spec can claim but a consumer must not decide: the node
  (``nodeName``), the scheduler, tolerations (only the policy's), priority and preemption, the runtime
  class, the ServiceAccount (only the twin's ``default``, never its token: home tokens reach offloaded pods
  as Secrets), projected ServiceAccount tokens and pod certificates (credentials issued by this cluster),
  storage claims but of the classes the policy offers (a generic ephemeral volume's template as a claim of
  the peer's own: :data:`liqo.api.storage.CLAIM_RULES`), resource claims, scheduling gates and ephemeral
  containers; pod (anti-)affinity to pods of other namespaces (the provider's own workloads: a peer would
  probe where they run, or push them off nodes); probes and lifecycle hooks aimed at a ``host``, which the
  kubelet dials from the node (its neighbours, the cloud's metadata service) instead of the pod;
- labels and annotations: maps of strings, AppArmor's confined (the baseline above).

Some of the ShadowPod is not refused but changed, where the pod is made: ``automountServiceAccountToken``
is forced false and ``terminationGracePeriodSeconds`` cut to the policy's maximum (:class:`Reset`), and the
real pod gets only the ShadowPod's labels and annotations whose keys are on an allowlist (:data:`LABEL_KEYS`,
:data:`ANNOTATION_KEYS`, and what the policy adds); the others are left behind (:class:`Dropped`), since
other components of the provider act on keys they find on a pod (Multus attaches networks, Calico hands out
addresses, Istio and Linkerd inject sidecars with volumes and traffic rules of the annotations' choosing, the
cluster autoscaler keeps nodes). A key without a prefix is the user's own and always copied. Left behind
rather than refused: the keys matter only on the real pod, and the ShadowPod is a resource of the twin that
no component of the provider selects by them; refused, every Helm chart's pod (``helm.sh/chart``) and every
pod a mesh or a scraper is told about would never run on a provider, for a reason the consumer's user cannot
fix. The ShadowPod controller names the keys left behind in an Event on the ShadowPod and on the pod (which
the consumer's virtual kubelet mirrors onto the home pod).

One pure function, :func:`shadow_pod_verdict`, serves the validating webhook (before the ShadowPod is
stored) and the ShadowPod controller (before the pod is created: for ShadowPods stored while the webhook
was not registered). A peer writes the input, so nothing here may raise on it: a value of the wrong type is
a violation naming the field, like any other. What the verdict judges of labels and annotations (their type,
AppArmor's values) does not depend on the policy: a policy that lost a key since a ShadowPod was admitted
never refuses that ShadowPod's later writes, it only leaves the key off the pod made next.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from liqo.api import names
from liqo.api.storage import CLAIM_RULES, ClassOffer, claim_refusals
from liqo.offloading.twins import is_twin_of

BASELINE = "baseline"
RESTRICTED = "restricted"
DEFAULT_GRACE_SECONDS = 30
"""What Kubernetes gives a pod that does not say: it counts against the policy's maximum too."""

BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
"""The container runtimes' default capability set: adding one of these grants nothing new."""
RESTRICTED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ping_group_range",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
"""Sysctls namespaced to the pod and isolated from the node (the baseline's list)."""
SELINUX_TYPES = ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
CONFINED_PROFILES = ("RuntimeDefault", "Localhost")
"""Seccomp and AppArmor profile types that confine a container (the field form). Tuples, not sets: a peer's
value may be unhashable, and membership must compare rather than hash."""
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
VOLUME_TYPES = ("configMap", "downwardAPI", "emptyDir", "projected", "secret")
"""The volume types a peer's pod may use at every level: the twin's ConfigMaps and Secrets (the consumer's
own), the pod's own fields, scratch space counted in the pod's memory or its node's ephemeral storage. A
volume naming no type is one of these (the API server makes it an ``emptyDir``). Every other type is refused,
known or not: the in-tree network and cloud disks (``nfs``, ``iscsi``, ``fc``, ``cephfs``, ``rbd``,
``glusterfs``, ``azureFile``...), ``flexVolume`` and inline ``csi`` (drivers mount with the node's identity
and may take any attribute), ``gitRepo`` (git run by the kubelet), ``image`` (not needed by ordinary pods:
allowed once someone asks), ``hostPath``."""
STORAGE_VOLUME_TYPES = ("persistentVolumeClaim", "ephemeral")
"""Volumes that claim the provider's storage: only when the policy shares it."""
PROJECTED_SOURCES = ("configMap", "downwardAPI", "secret")
"""What a projected volume may gather: the same objects as the volume types above."""
REFUSED_PROJECTIONS = {
    "serviceAccountToken": "a token of this cluster's ServiceAccount; home tokens come as Secrets",
    "podCertificate": "a certificate issued by this cluster",
    "clusterTrustBundle": "this cluster's trust bundles are cluster-wide objects a peer may not read",
}
"""Known sources refused, with why; any other source off :data:`PROJECTED_SOURCES` is refused too."""
PROVIDER_FIELDS = {
    "nodeName": "the provider's scheduler picks the node",
    "schedulerName": "the provider's default scheduler places a peer's pods",
    "priorityClassName": "priorities are the provider's to give",
    "priority": "priorities are the provider's to give",
    "preemptionPolicy": "preemption is the provider's to allow",
    "runtimeClassName": "runtime classes are the provider's to choose",
}
"""Pod fields that must be absent (empty), with why."""
REFUSED_LISTS = {
    "resourceClaims": "resource claims would allocate the provider's devices",
    "schedulingGates": "scheduling gates would hold the pod on the provider",
    "ephemeralContainers": "ephemeral containers are not run for peers",
}
_CONTAINER_KINDS = ("containers", "initContainers")
POD_AFFINITIES = ("podAffinity", "podAntiAffinity")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
HOOKS = ("postStart", "preStop")
DIALLED_ACTIONS = ("httpGet", "tcpSocket")
"""Probe and hook actions whose ``host`` the kubelet dials (``grpc`` takes none: always the pod's address)."""
LABEL_KEYS = (
    "app.kubernetes.io/*",
    "statefulset.kubernetes.io/pod-name",
    "apps.kubernetes.io/pod-index",
    "batch.kubernetes.io/job-name",
    "batch.kubernetes.io/controller-uid",
    "batch.kubernetes.io/job-completion-index",
    names.REMOTE_CLUSTER_ID,
    names.SHADOW_POD,
)
"""Label keys with a prefix that every provider copies onto a peer's pod: Kubernetes' recommended labels (and
liqo's ``managed-by``), those its workload controllers put on their pods (acted on by controllers in the
pod's own namespace only: a twin has none of the provider's), liqo's on every ShadowPod, and the one this
cluster sets on the pod itself (a consumer's pod may be a pod of a ShadowPod at home)."""
ANNOTATION_KEYS = (
    "kubectl.kubernetes.io/*",
    "batch.kubernetes.io/job-completion-index",
    f"{APPARMOR_ANNOTATION}*",
    names.GRACE_PERIOD,
    names.HOME_POD_UID,
)
"""Annotation keys with a prefix that every provider copies: kubectl's (``restartedAt`` of a rollout
restart, ``default-container``: read by kubectl only), an Indexed Job's index (its containers read it
through the downward API), AppArmor's (judged: confined profiles only), liqo's grace period (read by this
cluster, checked) and the one this cluster sets on the pod itself."""
BOOKKEEPING_ANNOTATIONS = (names.GRACE_PERIOD,)
"""Annotations liqo's own components write on a ShadowPod for their bookkeeping, whose change never has the
ShadowPod judged again (:func:`liqo.offloading.shadowpod_webhook.unchanged`): the grace period the consumer's virtual
kubelet writes just before it deletes one (read by this cluster alone, checked there:
:func:`liqo.offloading.shadowpods.grace_period`). A deletion is never judged; refusing its preamble because
the consumer's policy tightened since the pod was made would keep that pod running here after its home pod
is gone."""


class SecurityPolicy(Protocol):
    """What a provider lets one consumer's pods do (``liqo.sharing.policy.PodSecurity`` is one)."""

    @property
    def level(self) -> str:
        """``baseline`` or ``restricted``."""

    @property
    def tolerations(self) -> Sequence[Mapping[str, Any]]:
        """The only tolerations the pods may carry."""

    @property
    def storage(self) -> Sequence[ClassOffer]:
        """The StorageClasses the pods' claims may name (none: no PVC and no generic ephemeral volume)."""

    @property
    def max_grace_seconds(self) -> int:
        """The longest termination grace period the pods get."""

    @property
    def allowed_label_keys(self) -> Sequence[str]:
        """Label keys copied onto the pods beyond :data:`LABEL_KEYS`: keys, or ``prefix/*``."""

    @property
    def allowed_annotation_keys(self) -> Sequence[str]:
        """Annotation keys copied onto the pods beyond :data:`ANNOTATION_KEYS`: keys, or ``prefix/*``."""


PolicySelector = Callable[[Sequence[Mapping[str, Any]], str], SecurityPolicy]
"""Which policy applies to a consumer, given every SharingPolicy (pure; the manager passes ``liqo.sharing``'s)."""


@dataclass(frozen=True)
class Violation:
    """A field the provider refuses, and the rule that refuses it."""

    path: str
    rule: str

    def __str__(self) -> str:
        return f"{self.path}: {self.rule}"


@dataclass(frozen=True)
class Reset:
    """A top-level pod spec field the provider sets whatever the consumer asked."""

    field: str
    value: Any
    reason: str


@dataclass(frozen=True)
class Dropped:
    """A label or annotation of the ShadowPod the provider leaves off the pod: its key is not on the allowlist."""

    field: str
    """``labels`` or ``annotations``."""
    key: str

    def __str__(self) -> str:
        return f"metadata.{self.field}[{self.key}]"


KEYS_ALLOWED_BY = {"labels": "podSecurity.allowedLabelKeys", "annotations": "podSecurity.allowedAnnotationKeys"}
"""Where a provider's SharingPolicy lists the keys it copies beyond the allowlist, by field."""


@dataclass(frozen=True)
class Verdict:
    """What the provider makes of a pod: refused if any violation, else run with the resets and drops applied."""

    violations: tuple[Violation, ...] = ()
    resets: tuple[Reset, ...] = ()
    dropped: tuple[Dropped, ...] = ()

    @property
    def allowed(self) -> bool:
        """Whether the pod may run (after :func:`apply_resets` and :func:`copied_keys`)."""
        return not self.violations

    def message(self) -> str:
        """Every violation, for the refusal the consumer sees on its home pod."""
        return "this provider refuses the pod: " + "; ".join(str(v) for v in self.violations)

    def dropped_message(self) -> str:
        """The keys left off the pod, and where the provider's admin would allow them."""
        fields = sorted({d.field for d in self.dropped})
        return (
            f"not copied onto the pod: {', '.join(str(d) for d in self.dropped)} (other components of this provider"
            " act on such keys on a pod); this provider's admin copies more keys for this consumer by listing them"
            f" (keys, or prefix/*) in its SharingPolicy's {' and '.join(KEYS_ALLOWED_BY[f] for f in fields)}"
        )


def apply_resets(spec: Mapping[str, Any], resets: Sequence[Reset]) -> dict[str, Any]:
    """``spec`` with the ``resets`` applied (pure; applying them twice changes nothing more)."""
    return {**spec, **{reset.field: reset.value for reset in resets}}


def copied_keys(shadow: Mapping[str, Any], *, field: str, dropped: Sequence[Dropped]) -> dict[str, str]:
    """The ShadowPod's labels or annotations (``field``) the pod gets: all but the verdict's ``dropped`` (pure).

    Only string entries of a map are ever copied (the verdict refuses any other, the API server too).
    """
    value = _metadata(shadow, field)
    if not isinstance(value, Mapping):
        return {}
    left = {d.key for d in dropped if d.field == field}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str) and k not in left}


def shadow_pod_verdict(
    shadow: Any, *, namespace: Mapping[str, Any] | None, policy_of: Callable[[str], SecurityPolicy]
) -> Verdict:
    """The verdict on a ShadowPod in ``namespace`` (None: not found), under its consumer's policy.

    The consumer is the one the *namespace* belongs to (a twin this cluster made), never a label on the
    ShadowPod, which the consumer writes. ``policy_of`` gives a consumer's policy.
    """
    consumer = twin_consumer(namespace)
    if consumer is None or namespace is None:
        rule = "ShadowPods are accepted only in twin namespaces this cluster made for a consumer"
        return Verdict(violations=(Violation("metadata.namespace", rule),))
    if not isinstance(shadow, Mapping):
        return Verdict(violations=(Violation("(object)", "must be an object"),))
    spec = shadow.get("spec")
    pod = spec.get("pod") if isinstance(spec, Mapping) else None
    return pod_verdict(
        pod,
        labels=_metadata(shadow, "labels"),
        annotations=_metadata(shadow, "annotations"),
        own_namespace=str((namespace.get("metadata") or {}).get("name", "")),
        policy=policy_of(consumer),
    )


def _metadata(obj: Any, field: str) -> Any:
    """``obj``'s ``metadata.<field>`` as written: anything, None if absent."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    return meta.get(field) if isinstance(meta, Mapping) else None


def twin_consumer(namespace: Mapping[str, Any] | None) -> str | None:
    """The consumer whose twin ``namespace`` is, or None if it is no twin (pure)."""
    if namespace is None:
        return None
    consumer = names.labelled_peer_id(namespace)
    if not consumer or not is_twin_of(dict(namespace), consumer_id=consumer):
        return None
    return consumer


def pod_verdict(
    spec: Any, *, labels: Any, annotations: Any, own_namespace: str, policy: SecurityPolicy, path: str = "spec.pod"
) -> Verdict:
    """The verdict on pod ``spec`` in namespace ``own_namespace`` under ``policy`` (pure, never raises).

    ``labels`` and ``annotations`` are the ShadowPod's (the pod's to be).
    """
    check = _Check(restricted=policy.level != BASELINE)
    pod = check.mapping(spec, path)
    if pod is None:
        if spec is None:
            check.refuse(path, "is required")
        return Verdict(violations=tuple(check.violations))
    dropped = [
        *check.keys(labels, "labels", accepted=(*LABEL_KEYS, *policy.allowed_label_keys)),
        *check.keys(annotations, "annotations", accepted=(*ANNOTATION_KEYS, *policy.allowed_annotation_keys)),
    ]
    check.annotations(annotations)
    check.pod_level(pod, path)
    check.provider_fields(pod, path, policy)
    check.affinity(pod.get("affinity"), f"{path}.affinity", own_namespace=own_namespace)
    check.volumes(pod.get("volumes"), f"{path}.volumes", storage=policy.storage)
    for kind in _CONTAINER_KINDS:
        for index, container in check.items(pod.get(kind), f"{path}.{kind}"):
            check.container(container, f"{path}.{kind}[{index}]", pod_context=pod.get("securityContext"))
    resets = _resets(pod, path, policy, check)
    return Verdict(violations=tuple(check.violations), resets=tuple(resets), dropped=tuple(dropped))


def key_accepted(key: str, patterns: Sequence[str]) -> bool:
    """Whether label or annotation ``key`` is copied: one of ``patterns`` (keys, or ``prefix/*``) or unprefixed (pure).

    A prefix pattern covers keys of exactly that prefix: ``prometheus.io/*`` is not ``x.prometheus.io/...``.
    """
    prefix, slash, _ = key.rpartition("/")
    return not slash or key in patterns or f"{prefix}/*" in patterns


def _resets(pod: Mapping[str, Any], path: str, policy: SecurityPolicy, check: _Check) -> list[Reset]:
    resets = []
    if pod.get("automountServiceAccountToken") is not False:
        reason = "the provider's ServiceAccount token is never mounted into a consumer's pod"
        resets.append(Reset("automountServiceAccountToken", False, reason))
    grace = pod.get("terminationGracePeriodSeconds")
    if grace is not None and not _is_int(grace):
        check.refuse(f"{path}.terminationGracePeriodSeconds", "must be an integer")
    elif (DEFAULT_GRACE_SECONDS if grace is None else grace) > policy.max_grace_seconds:
        reason = f"cut to this provider's maximum of {policy.max_grace_seconds} s"
        resets.append(Reset("terminationGracePeriodSeconds", policy.max_grace_seconds, reason))
    return resets


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _off(value: Any) -> bool:
    """Whether a flag is unset or false (anything else, a wrong type included, is not)."""
    return value is None or value is False


class _Check:
    """Collects violations while walking a pod; every accessor tolerates any JSON value."""

    def __init__(self, *, restricted: bool) -> None:
        self.restricted = restricted
        self.violations: list[Violation] = []

    def refuse(self, path: str, rule: str) -> None:
        self.violations.append(Violation(path, rule))

    def mapping(self, value: Any, path: str) -> Mapping[str, Any] | None:
        """``value`` if it is an object; None if absent or (refused) of another type."""
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self.refuse(path, "must be an object")
            return None
        return value

    def items(self, value: Any, path: str) -> list[tuple[int, Mapping[str, Any]]]:
        """The objects of list ``value`` with their indices; a non-list or non-object item is refused."""
        if value is None:
            return []
        if not isinstance(value, list):
            self.refuse(path, "must be a list")
            return []
        found = []
        for index, item in enumerate(value):
            obj = self.mapping(item, f"{path}[{index}]")
            if obj is not None:
                found.append((index, obj))
            elif item is None:
                self.refuse(f"{path}[{index}]", "must be an object")
        return found

    def strings(self, value: Any, path: str) -> list[str]:
        """The strings of list ``value``; anything else is refused."""
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            self.refuse(path, "must be a list of strings")
            return []
        return list(value)

    # -- the pod --------------------------------------------------------------------------------------------

    def keys(self, value: Any, field: str, *, accepted: Sequence[str]) -> list[Dropped]:
        """The keys of labels or annotations ``value`` (``field``) off the ``accepted`` patterns.

        A value that is no string is refused.
        """
        dropped = []
        for key, text in (self.mapping(value, f"metadata.{field}") or {}).items():
            if not isinstance(text, str):
                self.refuse(f"metadata.{field}[{key}]", "must be a string")
            elif not key_accepted(str(key), accepted):
                dropped.append(Dropped(field, str(key)))
        return dropped

    def annotations(self, value: Any) -> None:
        annotations = self.mapping(value, "metadata.annotations")
        for key, profile in (annotations or {}).items():
            if isinstance(key, str) and key.startswith(APPARMOR_ANNOTATION):
                confined = isinstance(profile, str) and (
                    profile == "runtime/default" or profile.startswith("localhost/")
                )
                if not confined:
                    rule = "AppArmor must stay confined: runtime/default or localhost/<profile> (baseline)"
                    self.refuse(f"metadata.annotations[{key}]", rule)

    def pod_level(self, pod: Mapping[str, Any], path: str) -> None:
        for flag, shares in (("hostNetwork", "network"), ("hostPID", "processes"), ("hostIPC", "IPC")):
            if not _off(pod.get(flag)):
                self.refuse(f"{path}.{flag}", f"the node's {shares} are not shared (baseline)")
        context = self.mapping(pod.get("securityContext"), f"{path}.securityContext")
        if context is None:
            return
        at = f"{path}.securityContext"
        self.security_options(context, at)
        for index, sysctl in self.items(context.get("sysctls"), f"{at}.sysctls"):
            name = sysctl.get("name")
            if not isinstance(name, str) or name not in SAFE_SYSCTLS:
                self.refuse(f"{at}.sysctls[{index}].name", "only the node-isolated sysctls are allowed (baseline)")
        if self.restricted:
            self.run_as_user(context, at)

    def security_options(self, context: Mapping[str, Any], at: str) -> None:
        """The baseline rules that apply alike to the pod's and each container's security context."""
        windows = self.mapping(context.get("windowsOptions"), f"{at}.windowsOptions")
        if windows is not None and not _off(windows.get("hostProcess")):
            self.refuse(f"{at}.windowsOptions.hostProcess", "Windows host processes are refused (baseline)")
        selinux = self.mapping(context.get("seLinuxOptions"), f"{at}.seLinuxOptions")
        if selinux is not None:
            if selinux.get("type") not in (None, *SELINUX_TYPES):
                self.refuse(f"{at}.seLinuxOptions.type", "only the container SELinux types are allowed (baseline)")
            for field in ("user", "role"):
                if selinux.get(field) not in (None, ""):
                    self.refuse(f"{at}.seLinuxOptions.{field}", f"a custom SELinux {field} is refused (baseline)")
        for field, name in (("seccompProfile", "seccomp"), ("appArmorProfile", "AppArmor")):
            profile = self.mapping(context.get(field), f"{at}.{field}")
            if profile is not None and profile.get("type") not in (None, *CONFINED_PROFILES):
                self.refuse(f"{at}.{field}.type", f"{name} must stay confined: RuntimeDefault or Localhost (baseline)")

    def run_as_user(self, context: Mapping[str, Any], at: str) -> None:
        user = context.get("runAsUser")
        if user is not None and (not _is_int(user) or user == 0):
            self.refuse(f"{at}.runAsUser", "must not be 0: containers run as non-root (restricted)")

    def provider_fields(self, pod: Mapping[str, Any], path: str, policy: SecurityPolicy) -> None:
        for field, why in PROVIDER_FIELDS.items():
            if pod.get(field) not in (None, ""):
                self.refuse(f"{path}.{field}", f"must not be set: {why}")
        for field, why in REFUSED_LISTS.items():
            if pod.get(field) not in (None, []):
                self.refuse(f"{path}.{field}", f"must be empty: {why}")
        for field in ("serviceAccountName", "serviceAccount"):
            if pod.get(field) not in (None, "", "default"):
                self.refuse(f"{path}.{field}", "only the twin namespace's default ServiceAccount is used")
        allowed = [_toleration_id(t) for t in policy.tolerations]
        for index, toleration in self.items(pod.get("tolerations"), f"{path}.tolerations"):
            seconds = toleration.get("tolerationSeconds")
            if _toleration_id(toleration) not in allowed or not (seconds is None or _is_int(seconds)):
                self.refuse(f"{path}.tolerations[{index}]", "not among the tolerations this provider allows")

    def affinity(self, value: Any, path: str, *, own_namespace: str) -> None:
        """Pod (anti-)affinity only to pods of the pod's own namespace; node affinity is the pod's to choose."""
        affinity = self.mapping(value, path) or {}
        for kind in POD_AFFINITIES:
            rules = self.mapping(affinity.get(kind), f"{path}.{kind}") or {}
            at = f"{path}.{kind}.requiredDuringSchedulingIgnoredDuringExecution"
            for index, term in self.items(rules.get("requiredDuringSchedulingIgnoredDuringExecution"), at):
                self.affinity_term(term, f"{at}[{index}]", own_namespace=own_namespace)
            at = f"{path}.{kind}.preferredDuringSchedulingIgnoredDuringExecution"
            for index, weighted in self.items(rules.get("preferredDuringSchedulingIgnoredDuringExecution"), at):
                preferred = self.mapping(weighted.get("podAffinityTerm"), f"{at}[{index}].podAffinityTerm")
                if preferred is not None:
                    self.affinity_term(preferred, f"{at}[{index}].podAffinityTerm", own_namespace=own_namespace)

    def affinity_term(self, term: Mapping[str, Any], at: str, *, own_namespace: str) -> None:
        if term.get("namespaceSelector") is not None:
            rule = "pods of the provider's other namespaces are not a peer's to be placed by (even {} selects them)"
            self.refuse(f"{at}.namespaceSelector", rule)
        if any(name != own_namespace for name in self.strings(term.get("namespaces"), f"{at}.namespaces")):
            rule = f"only the pod's own namespace ({own_namespace}) may be named: the others are the provider's"
            self.refuse(f"{at}.namespaces", rule)

    def volumes(self, value: Any, path: str, *, storage: Sequence[ClassOffer]) -> None:
        allowed = VOLUME_TYPES + STORAGE_VOLUME_TYPES if storage else VOLUME_TYPES
        for index, volume in self.items(value, path):
            at = f"{path}[{index}]"
            # A null field is an absent one: the API server decodes it to no source.
            for kind in sorted(k for k, source in volume.items() if k != "name" and source is not None):
                if kind == "hostPath":
                    self.refuse(f"{at}.hostPath", "hostPath volumes are refused (baseline)")
                elif kind in STORAGE_VOLUME_TYPES and not storage:
                    self.refuse(f"{at}.{kind}", "this provider does not share storage with you")
                elif kind not in allowed:
                    rule = f"{kind} volumes are not allowed on this provider (only {', '.join(allowed)})"
                    self.refuse(f"{at}.{kind}", rule)
                elif kind == "ephemeral":
                    self.ephemeral(volume["ephemeral"], f"{at}.ephemeral", storage=storage)
            projected = self.mapping(volume.get("projected"), f"{at}.projected")
            if projected is None:
                continue
            for source_index, source in self.items(projected.get("sources"), f"{at}.projected.sources"):
                for kind in sorted(k for k, item in source.items() if item is not None and k not in PROJECTED_SOURCES):
                    what = REFUSED_PROJECTIONS.get(
                        kind, f"projected volumes gather only {', '.join(PROJECTED_SOURCES)}"
                    )
                    self.refuse(f"{at}.projected.sources[{source_index}].{kind}", f"refused: {what}")

    def ephemeral(self, value: Any, at: str, *, storage: Sequence[ClassOffer]) -> None:
        """A generic ephemeral volume: its template is a claim this cluster makes for the peer, judged as one."""
        source = self.mapping(value, at) or {}
        template = self.mapping(source.get("volumeClaimTemplate"), f"{at}.volumeClaimTemplate") or {}
        at = f"{at}.volumeClaimTemplate"
        metadata = self.mapping(template.get("metadata"), f"{at}.metadata") or {}
        if metadata.get("annotations"):
            self.refuse(f"{at}.metadata.annotations", CLAIM_RULES["annotations"])
        spec = self.mapping(template.get("spec"), f"{at}.spec") or {}
        for path, rule in claim_refusals(spec, storage=storage):
            self.refuse(f"{at}.spec.{path}", rule)

    # -- containers -----------------------------------------------------------------------------------------

    def container(self, container: Mapping[str, Any], at: str, *, pod_context: Any) -> None:
        for probe in PROBES:
            self.handler(container.get(probe), f"{at}.{probe}")
        lifecycle = self.mapping(container.get("lifecycle"), f"{at}.lifecycle") or {}
        for hook in HOOKS:
            self.handler(lifecycle.get(hook), f"{at}.lifecycle.{hook}")
        for index, port in self.items(container.get("ports"), f"{at}.ports"):
            host_port = port.get("hostPort")
            if host_port is not None and (not _is_int(host_port) or host_port != 0):
                self.refuse(f"{at}.ports[{index}].hostPort", "host ports are refused (baseline)")
        context = self.mapping(container.get("securityContext"), f"{at}.securityContext") or {}
        sc = f"{at}.securityContext"
        if not _off(context.get("privileged")):
            self.refuse(f"{sc}.privileged", "privileged containers are refused (baseline)")
        if context.get("procMount") not in (None, "Default"):
            self.refuse(f"{sc}.procMount", "/proc stays masked: Default only (baseline)")
        self.security_options(context, sc)
        capabilities = self.mapping(context.get("capabilities"), f"{sc}.capabilities") or {}
        allowed = RESTRICTED_CAPABILITIES if self.restricted else BASELINE_CAPABILITIES
        level = RESTRICTED if self.restricted else BASELINE
        for capability in self.strings(capabilities.get("add"), f"{sc}.capabilities.add"):
            if capability not in allowed:
                self.refuse(f"{sc}.capabilities.add", f"capability {capability} is not allowed ({level})")
        if self.restricted:
            self.restricted_container(context, capabilities, sc, pod_context=pod_context)

    def handler(self, value: Any, at: str) -> None:
        """A probe or lifecycle hook: dialled at the pod's own address, never a ``host`` of the peer's choosing."""
        handler = self.mapping(value, at) or {}
        for action in DIALLED_ACTIONS:
            target = self.mapping(handler.get(action), f"{at}.{action}") or {}
            if target.get("host") not in (None, ""):
                rule = "must not be set: the kubelet would dial it from the node (its neighbours, 169.254.169.254)"
                self.refuse(f"{at}.{action}.host", rule)

    def restricted_container(
        self, context: Mapping[str, Any], capabilities: Mapping[str, Any], sc: str, *, pod_context: Any
    ) -> None:
        pod = pod_context if isinstance(pod_context, Mapping) else {}
        if context.get("allowPrivilegeEscalation") is not False:
            self.refuse(f"{sc}.allowPrivilegeEscalation", "must be false (restricted)")
        non_root = context.get("runAsNonRoot")
        if non_root is not True and not (non_root is None and pod.get("runAsNonRoot") is True):
            self.refuse(f"{sc}.runAsNonRoot", "must be true, here or for the whole pod (restricted)")
        self.run_as_user(context, sc)
        seccomp = context.get("seccompProfile")
        pod_seccomp = pod.get("seccompProfile")
        pod_confined = isinstance(pod_seccomp, Mapping) and pod_seccomp.get("type") in CONFINED_PROFILES
        if seccomp is None and not pod_confined:
            self.refuse(f"{sc}.seccompProfile", "RuntimeDefault or Localhost, here or for the whole pod (restricted)")
        if "ALL" not in self.strings(capabilities.get("drop"), f"{sc}.capabilities.drop"):
            self.refuse(f"{sc}.capabilities.drop", "must drop ALL (restricted)")


def _toleration_id(toleration: Mapping[str, Any]) -> tuple[Any, ...]:
    """What identifies a toleration (``tolerationSeconds`` aside: it only shortens it)."""
    return (
        toleration.get("key") or "",
        toleration.get("operator") or "Equal",
        toleration.get("value") or "",
        toleration.get("effect") or "",
    )
