"""Helpers both the unit and the integration tests use: waiting with a deadline, sample values, pods as the API
server returns them, JSON patches applied as the API server applies them. Pure, no cluster: the cluster helpers
are in :mod:`tests.integration.helpers`, the unit tests' own in :mod:`tests.unit.helpers`.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Awaitable, Callable
from typing import Any

from hypothesis import strategies as st

from liqo.install.values import Values
from liqo.kube.waiting import delays


async def eventually(
    check: Callable[[], Awaitable[bool]], *, timeout: float, message: str | Callable[[], str], every: float = 0.1
) -> None:
    """Wait until ``check()`` is true; fail with ``message`` after ``timeout`` seconds.

    ``message`` may be a function, called once at the deadline: what the check last saw, the first thing a
    reader of a failed CI run needs (a slow start and a lost pod both time out, only the state tells which).
    """
    deadline = time.monotonic() + timeout
    pauses = delays(every, longest=1.0)  # growing, as liqo's own waits do: a test's minute is 90 looks, not 600
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s: {message() if callable(message) else message}")
        await asyncio.sleep(next(pauses))


SAMPLE_VALUES = Values(
    api_server_url="https://127.0.0.1:6443",
    pod_cidr="10.244.0.0/16",
    service_cidr="10.96.0.0/16",
    cluster_name="rome",
    image="img",
)


_AMOUNTS = st.sampled_from(["100m", "1", "2", "64Mi", "1Gi", "0"])
_RESOURCE_LISTS = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), _AMOUNTS, max_size=3)
_NOISE = st.fixed_dictionaries({"env": st.just([{"name": "E", "value": "v"}]), "image": st.just("nginx")})


@st.composite
def _containers(draw: st.DrawFn, *, init: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": draw(st.text("abc", min_size=1, max_size=3))} | draw(_NOISE)
    resources = draw(st.fixed_dictionaries({}, optional={"requests": _RESOURCE_LISTS, "limits": _RESOURCE_LISTS}))
    if draw(st.booleans()):
        container["resources"] = resources
    if init and draw(st.booleans()):
        container["restartPolicy"] = "Always"
    return container


@st.composite
def api_pods(draw: st.DrawFn, *, nodes: tuple[str, ...] = ("n1", "n2")) -> dict[str, Any]:
    """A pod as an API server returns it, with every field a projection might wrongly drop or keep."""
    name = draw(st.text("abcdef", min_size=1, max_size=4))
    meta: dict[str, Any] = {
        "name": name,
        "namespace": draw(st.sampled_from(["default", "liqo-tenant-x", "twin"])),
        "uid": f"uid-{name}",
        "resourceVersion": str(draw(st.integers(1, 100))),
        "labels": {"app": name},
        "ownerReferences": [{"uid": draw(st.sampled_from(["s1", "s2"])), "controller": draw(st.booleans())}],
        "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
    }
    if draw(st.booleans()):
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {
        "containers": draw(st.lists(_containers(init=False), min_size=1, max_size=3)),
        "volumes": [{"name": "v", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
    }
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(_containers(init=True), max_size=3))
    if draw(st.booleans()):
        spec["nodeName"] = draw(st.sampled_from(nodes))
    if draw(st.booleans()):
        spec["overhead"] = draw(_RESOURCE_LISTS)
    if draw(st.booleans()):
        spec["resources"] = {"requests": draw(_RESOURCE_LISTS)}
    if draw(st.booleans()):
        spec["terminationGracePeriodSeconds"] = draw(st.integers(0, 100))
    status = {
        "phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])),
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "a", "ready": True}],
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def _tokens(path: str) -> list[str]:
    assert path.startswith("/"), path
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def apply_patch(document: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """``document`` with an RFC 6902 ``add``/``replace``/``remove`` patch applied (as the API server applies ours)."""
    result = copy.deepcopy(document)
    for op in patch:
        *parents, last = _tokens(op["path"])
        target: Any = result
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        if op["op"] == "remove":
            del target[int(last) if isinstance(target, list) else last]
            continue
        value = copy.deepcopy(op["value"])
        if op["op"] == "add":
            if isinstance(target, list):
                target.insert(len(target) if last == "-" else int(last), value)
            else:
                target[last] = value
        elif op["op"] == "replace":
            if isinstance(target, list):
                target[int(last)] = value
            else:
                assert last in target, f"replace of a missing member {op['path']}"
                target[last] = value
        else:
            raise AssertionError(f"unexpected op {op['op']}")
    return result
