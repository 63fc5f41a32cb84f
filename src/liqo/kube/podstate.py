"""Why a pod does not run, or runs but is not ready, in the words ``kubectl describe`` uses (pure).

Whenever liqo waits on pods and gives up, or refuses something because of one, the operator needs the one
fact ``kubectl describe pod`` would show them: the image is not pulled, no node fits, the container crashed,
the readiness probe fails. Three places tell it — the install's wait for its Deployments, the network
check's probe pods, the virtual kubelet's refusal of an exec into a container the provider has not started —
and they tell it the same way from here.

Every reason and message comes back escaped and cut (:func:`liqo.kube.printable.printable`): a provider
writes the status of the pods it runs for us, and even our own kubelet's messages may span lines.
"""

from __future__ import annotations

from collections.abc import Iterator

from liqo.kube.objects import Obj
from liqo.kube.printable import printable

MAX_TEXT = 300
"""At most this many characters of a reason and its message."""

_KINDS = ("initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses")


def container_statuses(pod: Obj) -> Iterator[Obj]:
    """Every container status of ``pod``, init containers first."""
    status = pod.get("status") or {}
    for kind in _KINDS:
        yield from status.get(kind) or ()


def container_status(pod: Obj, name: str) -> Obj | None:
    """The status of the container called ``name``, or None if the kubelet reported none yet."""
    return next((s for s in container_statuses(pod) if s.get("name") == name), None)


def waiting(state: Obj) -> str:
    """``ErrImagePull (failed to pull "nginx")``: a ``waiting`` state's reason and message."""
    detail = f" ({state['message']})" if state.get("message") else ""
    return printable(f"{state.get('reason') or 'unknown'}{detail}", limit=MAX_TEXT)


def terminated(state: Obj) -> str:
    """``Error, exit code 1``: a ``terminated`` state's reason and exit code."""
    return f"{printable(str(state.get('reason') or 'unknown'), limit=MAX_TEXT)}, exit code {state.get('exitCode')}"


def container_trouble(status: Obj) -> str | None:
    """Why the container of ``status`` is not ready (``container "x" waiting: …``); None if it is."""
    if status.get("ready"):
        return None
    name = f'container "{printable(str(status.get("name", "")), limit=MAX_TEXT)}"'
    state = status.get("state") or {}
    restarts = status.get("restartCount") or 0
    last = (status.get("lastState") or {}).get("terminated")
    history = f", restarted {restarts} times, last {terminated(last)}" if restarts and last else ""
    if (now := state.get("waiting")) is not None:
        return f"{name} waiting: {waiting(now)}{history}"
    if (ended := state.get("terminated")) is not None:
        return f"{name} terminated: {terminated(ended)}"
    return f"{name} running, not ready{history}"


def pod_trouble(pod: Obj) -> str | None:
    """Why ``pod`` is not ready, its first cause only; None if it is.

    In the order the causes arise: not scheduled, then a container not ready, then whatever the pod's
    conditions say (a readiness gate, a status no kubelet wrote yet).
    """
    status = pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or ()}
    if (conditions.get("Ready") or {}).get("status") == "True":
        return None
    scheduled = conditions.get("PodScheduled") or {}
    if scheduled.get("status") == "False":
        return f"not scheduled: {_condition(scheduled)}"
    if trouble := next(filter(None, map(container_trouble, container_statuses(pod))), None):
        return trouble
    failing = next((c for c in conditions.values() if c.get("status") == "False" and c.get("message")), None)
    if failing is not None:
        return _condition(failing)
    return f"{printable(str(status.get('phase') or 'Pending'), limit=MAX_TEXT)}, not ready"


def _condition(condition: Obj) -> str:
    reason = condition.get("reason") or condition.get("type") or "unknown"
    detail = f" ({condition['message']})" if condition.get("message") else ""
    return printable(f"{reason}{detail}", limit=MAX_TEXT)
