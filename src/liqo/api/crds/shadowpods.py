"""The ShadowPod CRD: a consumer's pod as its provider runs it (pure)."""

from __future__ import annotations

from typing import Any

from liqo.api.crds.schema import (
    MAX_CONTAINERS,
    Schema,
    column,
    crd,
    enum,
    string,
    struct,
)
from liqo.api.resources import (
    SHADOW_PODS,
)
from liqo.api.shadowpods import WAIT_REASONS, ShadowPodPhase


def _preserved(description: str, properties: dict[str, Schema] | None = None) -> Schema:
    """An object kept whole (a pod spec), with ``properties`` typed so that validation rules can read them."""
    schema: Schema = {"type": "object", "description": description, "x-kubernetes-preserve-unknown-fields": True}
    if properties:
        schema["properties"] = properties
    return schema


def _containers(description: str) -> Schema:
    security = _preserved(
        "The container's security context.",
        {"privileged": {"type": "boolean", "description": "Whether the container runs privileged."}},
    )
    container = _preserved("A container, as in a Pod.", {"securityContext": security})
    return {"type": "array", "description": description, "items": container, "maxItems": MAX_CONTAINERS}


_UNPRIVILEGED = (
    "!has({0}) || {0}.all(c, !has(c.securityContext) || !has(c.securityContext.privileged)"
    " || !c.securityContext.privileged)"
)


def shadow_pod_crd() -> dict[str, Any]:
    """ShadowPod (namespaced, provider side): a consumer's pod that this cluster runs for it.

    The refusals of host-level access live in the schema: the provider's own API server rejects such a
    ShadowPod with the message below, before anything runs, and the consumer shows it on the home pod.
    """
    pod = _preserved(
        "The pod to run: its spec, without the scheduling fields of the consumer's cluster.",
        {
            "hostNetwork": {"type": "boolean", "description": "Refused: the pod would share the node's network."},
            "hostPID": {"type": "boolean", "description": "Refused: the pod would see the node's processes."},
            "hostIPC": {"type": "boolean", "description": "Refused: the pod would share the node's IPC."},
            "containers": _containers("The pod's containers."),
            "initContainers": _containers("The pod's init containers."),
        },
    )
    pod["x-kubernetes-validations"] = [
        {
            "rule": "!has(self.hostNetwork) || !self.hostNetwork",
            "message": "hostNetwork pods are refused by this provider: they would share its node's network",
        },
        {
            "rule": "!has(self.hostPID) || !self.hostPID",
            "message": "hostPID pods are refused by this provider: they would see its node's processes",
        },
        {
            "rule": "!has(self.hostIPC) || !self.hostIPC",
            "message": "hostIPC pods are refused by this provider: they would share its node's IPC",
        },
        {
            "rule": _UNPRIVILEGED.format("self.containers") + " && " + _UNPRIVILEGED.format("self.initContainers"),
            "message": "privileged containers are refused by this provider",
        },
    ]
    spec = struct(
        "The pod a consumer asks this cluster to run.",
        {
            "pod": pod,
            "homePodUID": string("The UID of the pod in the consumer's cluster this one stands for."),
        },
        required=("pod",),
    )
    status = struct(
        "What the provider did with it.",
        {
            "phase": enum(
                "Whether the provider created the pod, refused it, or holds it back until it may run.",
                tuple(ShadowPodPhase),
            ),
            "reason": string(f"Why it waits ({', '.join(WAIT_REASONS)}) or was refused, in one word."),
            "message": string("Why, when refused or waiting: the resource, and the pod's and the budget's figures."),
        },
    )
    return crd(
        SHADOW_PODS,
        short_name="shp",
        description="A pod a consumer cluster asks this cluster to run; re-created while it exists.",
        spec=spec,
        status=status,
        columns=[
            column("Phase", ".status.phase"),
            column("Reason", ".status.reason"),
            column("Home Pod", ".spec.homePodUID", priority=1),
        ],
    )
