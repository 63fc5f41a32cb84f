"""Home pod → the ShadowPod the provider runs, and the remote pod's status → the home pod (pure).

The ShadowPod carries the pod minus what only means something at home (its node, scheduling constraints
that name home nodes, priority classes, the home ServiceAccount, whose token comes instead from a Secret the
token reflector keeps filled: :mod:`liqo.virtualkubelet.forge.tokens`). Back home go the phase, conditions
(but ``PodScheduled``, home's scheduler's), container statuses and IPs of the remote pod once they are news
for home (:func:`news_for_home`: on the happy path, once, when it runs), or, while the provider holds it
back or refuses it, a Pending status with the provider's reason.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Collection

from liqo.api import names
from liqo.api.networks import IPAddress, Refused, Remapped, Translation
from liqo.api.resources import SHADOW_PODS
from liqo.api.shadowpods import WAIT_REASONS, ShadowPodPhase
from liqo.kube.objects import Obj
from liqo.virtualkubelet.forge.common import DROPPED_ANNOTATIONS, PROVIDER_REFUSED
from liqo.virtualkubelet.forge.tokens import is_token_volume, token_secret_name

_DROPPED_POD_FIELDS = frozenset(
    {
        "nodeName",  # the virtual node's name means nothing remotely; the provider's scheduler decides
        "nodeSelector",
        "affinity",
        "tolerations",
        "topologySpreadConstraints",
        "schedulerName",
        "priority",  # set by the home priority admission; the provider computes its own
        "priorityClassName",
        "preemptionPolicy",
        "overhead",
        "serviceAccount",  # deprecated alias
        "serviceAccountName",  # home service accounts do not exist remotely (tokens are reflected instead)
        "automountServiceAccountToken",
        "schedulingGates",
        "resourceClaims",
        "runtimeClassName",  # home runtime classes mean nothing remotely (and the provider refuses them)
    }
)
_STATUS_FIELDS = (
    "phase",
    "conditions",
    "containerStatuses",
    "initContainerStatuses",
    "ephemeralContainerStatuses",
    "podIP",
    "podIPs",
    "startTime",
    "reason",
    "message",
    "qosClass",
)
_SCHEDULED = "PodScheduled"
_STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
"""Waiting reasons of a container on its way up; any other (``ErrImagePull``, ``CrashLoopBackOff``...) is news."""
_CLEARED_FIELDS = ("reason", "message")
"""Status fields a refusal sets at home and the remote pod, once running, may not have."""


def remote_pod_spec(home_spec: Obj, *, token_secret: str) -> Obj:
    """The spec the provider runs for a home pod: scheduling removed, the home token from ``token_secret`` (pure)."""
    spec = {key: value for key, value in home_spec.items() if key not in _DROPPED_POD_FIELDS}
    if "volumes" in spec:
        spec["volumes"] = [_token_secret_volume(v, token_secret) if is_token_volume(v) else v for v in spec["volumes"]]
    # The provider's default ServiceAccount must not mount its own token into a consumer's workload.
    spec["automountServiceAccountToken"] = False
    return spec


def _token_secret_volume(volume: Obj, secret: str) -> Obj:
    source: Obj = {"secretName": secret}
    if "defaultMode" in volume["projected"]:
        source["defaultMode"] = volume["projected"]["defaultMode"]
    return {"name": volume["name"], "secret": source}


def shadow_pod(home_pod: Obj, *, namespace: str, home_cluster_id: str) -> Obj:
    """The ShadowPod asking the provider to run ``home_pod`` in twin ``namespace`` (pure)."""
    meta = home_pod["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in DROPPED_ANNOTATIONS}
    labels = dict(meta.get("labels") or {}) | names.peer_labels(home_cluster_id)
    # The provider's finalizer comes with the creation: one write less per pod than the provider adding it.
    metadata: Obj = {"name": meta["name"], "namespace": namespace, "labels": labels, "finalizers": [names.FINALIZER]}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": SHADOW_PODS.api_version,
        "kind": SHADOW_PODS.kind,
        "metadata": metadata,
        "spec": {
            "pod": remote_pod_spec(home_pod["spec"], token_secret=token_secret_name(meta["name"])),
            "homePodUID": meta["uid"],
        },
    }


def shadow_is_current(shadow: Obj, desired: Obj) -> bool:
    """Whether ``shadow`` (as read) already asks for what ``desired`` asks (pure)."""
    meta, wanted = shadow["metadata"], desired["metadata"]
    return bool(
        shadow.get("spec") == desired["spec"]
        and (meta.get("labels") or {}) == wanted.get("labels", {})
        and (meta.get("annotations") or {}) == wanted.get("annotations", {})
    )


DEFAULT_GRACE_SECONDS = 30
"""A pod's ``terminationGracePeriodSeconds`` when its spec has none (the API server's default)."""


def shadow_grace(home_pod: Obj) -> int | None:
    """The grace period a deleted home pod's ShadowPod must carry; None when the pod's own will do (pure).

    The provider deletes the pod with the ShadowPod's grace, never above the pod's own (``liqo.io/
    grace-period-seconds``, capped there), and with the pod's own without one: only a shorter grace than
    the spec's is worth the write (a scale-down deletes with the spec's).
    """
    grace = home_pod["metadata"].get("deletionGracePeriodSeconds")
    own = home_pod["spec"].get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    return grace if isinstance(grace, int) and grace < own else None


def runs_home_pod(remote_pod: Obj, home_pod: Obj) -> bool:
    """Whether ``remote_pod`` runs this very home pod, not a deleted namesake (pure)."""
    annotations = remote_pod["metadata"].get("annotations") or {}
    return bool(annotations.get(names.HOME_POD_UID) == home_pod["metadata"]["uid"])


def home_status(remote_pod: Obj, *, node_address: str) -> Obj:
    """The home pod's status mirroring the remote pod's (pure).

    ``hostIP`` is the virtual node's address: the remote node means nothing at home. ``PodScheduled`` is left
    out: home's is its own scheduler's binding to the virtual node, the provider's says where the provider
    placed the pod (its Events, mirrored home, tell that).
    """
    remote = remote_pod.get("status") or {}
    status = {field: remote[field] for field in _STATUS_FIELDS if field in remote}
    conditions = [c for c in status.pop("conditions", None) or [] if c.get("type") != _SCHEDULED]
    if conditions:
        status["conditions"] = conditions
    for field in _CLEARED_FIELDS:
        # A refusal's reason (refused_status) must not outlive it: kubectl shows status.reason as the pod's
        # STATUS, so a running pod would read "DoesNotFitRemote". None deletes it in the strategic merge.
        status.setdefault(field, None)
    status["hostIP"] = node_address
    status["hostIPs"] = [{"ip": node_address}]
    return status


def news_for_home(remote_pod: Obj, home_pod: Obj) -> bool:
    """Whether the remote pod's status tells home something it must show now (pure).

    Not while the remote pod starts as it should (Pending, no container waiting for anything but its creation
    or its init containers) and the home pod shows only what its API server and scheduler gave it (Pending,
    bound): home already says Pending, and each write costs an update of the home pod and a notification to
    every watcher of it, so the one write on the happy path is the one that makes the pod Running (and
    Ready). News at once: a phase other than Pending, an image that does not pull, a failed init container,
    and anything home shows beyond a fresh pod (Running before the remote pod was re-created, a refusal's
    reason, an unreachable provider), which must be taken back.
    """
    remote = remote_pod.get("status") or {}
    if remote.get("phase", "Pending") != "Pending":
        return True
    containers = [*(remote.get("initContainerStatuses") or []), *(remote.get("containerStatuses") or [])]
    if not all(_starting(container.get("state") or {}) for container in containers):
        return True
    home = home_pod.get("status") or {}
    fresh = not home.get("reason") and all(c.get("type") == _SCHEDULED for c in home.get("conditions") or [])
    return not (fresh and home.get("phase", "Pending") == "Pending")


def _starting(state: Obj) -> bool:
    """Whether a container state is one a starting pod goes through (pure)."""
    if "waiting" in state:
        return (state["waiting"] or {}).get("reason") in _STARTING_REASONS
    if "terminated" in state:
        return (state["terminated"] or {}).get("exitCode") == 0  # an init container done
    return True


def held_back(shadow: Obj) -> tuple[str, str] | None:
    """Why the provider runs no pod for ``shadow``, as ``(reason, message)`` for the home pod; None if it does (pure).

    A ShadowPod waiting for its consumer's budget keeps the provider's reason (``OverBudget``,
    ``NoAcceptedOffer``); any other reason a provider writes is shown as ``ProviderRefused``, its message kept.
    """
    status = shadow.get("status") or {}
    message = str(status.get("message", ""))
    if status.get("phase") == ShadowPodPhase.REFUSED:
        return PROVIDER_REFUSED, message
    if status.get("phase") == ShadowPodPhase.WAITING:
        reason = status.get("reason")
        return (reason if reason in WAIT_REASONS else PROVIDER_REFUSED), message
    return None


PROVIDER_UNREACHABLE = "ProviderUnreachable"
"""The reason on the Ready condition of home pods whose provider does not answer."""


def unreachable_status(*, message: str) -> Obj:
    """The home pod's status while its provider does not answer: not Ready, all else as last known (pure).

    Not Ready takes it out of its Services' ready endpoints at home (the EndpointSlice controller reads the
    pod's Ready condition) rather than out of the slices: it is back the moment the provider answers.
    """
    return {"conditions": [{"type": "Ready", "status": "False", "reason": PROVIDER_UNREACHABLE, "message": message}]}


def refused_status(*, reason: str, message: str) -> Obj:
    """The home pod's status when the provider will not run it: Pending, with the reason on a condition."""
    return {
        "phase": "Pending",
        "conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": message}],
        "reason": reason,
        "message": message,
    }


def status_differs(home_pod: Obj, desired: Obj) -> bool:
    """Whether the home pod's status lacks something of ``desired`` (pure).

    Conditions are compared by type, since the home scheduler owns ``PodScheduled``.
    """
    current = home_pod.get("status") or {}
    for field, value in desired.items():
        if field == "conditions":
            mine = {c["type"]: c for c in current.get("conditions") or []}
            if any(mine.get(c["type"]) != c for c in value):
                return True
        elif current.get(field) != value:
            return True
    return False


def pod_ips(status: Obj) -> list[str]:
    """The IPs a pod status lists (``podIPs``, else ``podIP``), as written."""
    listed = [entry.get("ip") for entry in status.get("podIPs") or []] or [status.get("podIP")]
    return [str(ip) for ip in listed if ip]


def claims_home_pod(
    status: Obj, *, translate: Callable[[str], Translation], returned: Callable[[str], IPAddress | None]
) -> bool:
    """Whether the provider gives, as this pod's, an address of one of home's own pods (pure).

    It does for a pod it sent back to run here: only then is home's pod looked up (:func:`sent_back`).
    """
    return any(isinstance(translate(ip), Refused) and returned(ip) is not None for ip in pod_ips(status))


def sent_back(
    translate: Callable[[str], Translation],
    *,
    returned: Callable[[str], IPAddress | None],
    home_ips: Collection[str],
) -> Callable[[str], Translation]:
    """``translate``, except for an address that names home's own pod running this very pod (pure).

    The provider sent the pod back here (a tether's controlling peer does): it runs on home's node, in the
    provider's twin here, and home dials it at its own address. ``home_ips`` are that pod's IPs, which the
    caller found with home's own eyes; an address naming any other pod of home's stays refused, so a peer
    cannot make home's Services send traffic to a pod of home's it does not run.
    """

    def translated(address: str) -> Translation:
        verdict = translate(address)
        if not isinstance(verdict, Refused):
            return verdict
        home_ip = returned(address)
        if home_ip is None:
            return verdict
        if str(home_ip) not in home_ips:
            return Refused(f"{address} would be our pod {home_ip}, which runs no pod of the provider's for this one")
        return Remapped(address=home_ip, original=ipaddress.ip_address(address))

    return translated


def with_home_addresses(status: Obj, *, translate: Callable[[str], Translation]) -> tuple[Obj, str | None]:
    """``status`` with its pod IPs as home must dial them, and why some could not be given (pure).

    An IP the translation refuses is left out, never copied as it is: it would mean another pod at home (an
    overlapping pod CIDR) and home's EndpointSlices would send traffic there. With none left, ``podIP`` and
    ``podIPs`` are cleared (None deletes them in the strategic merge), and the pod is no Service endpoint.
    """
    listed = pod_ips(status)
    addresses: list[str] = []
    reason = None
    for ip in listed:
        translation = translate(ip)
        if isinstance(translation, Refused):
            reason = reason or translation.reason
        else:
            addresses.append(str(translation.address))
    if not listed:
        return status, None
    translated = dict(status)
    translated["podIP"] = addresses[0] if addresses else None
    translated["podIPs"] = [{"ip": address} for address in addresses] if addresses else None
    return translated, reason


_REPLACED_LISTS = ("podIPs", "hostIPs")
"""Lists a strategic merge patch would merge by ``ip``: a re-created remote pod has a new IP, not two."""


def status_patch(status: Obj) -> Obj:
    """The strategic-merge body setting ``status`` on a home pod (pure).

    Conditions merge by type (the scheduler's ``PodScheduled`` stays); the IP lists are replaced whole.
    """
    body = dict(status)
    for field in _REPLACED_LISTS:
        if body.get(field) is not None:
            body[field] = [{"$patch": "replace"}, *body[field]]
    return {"status": body}
