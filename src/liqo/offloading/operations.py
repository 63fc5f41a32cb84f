"""What ``liqoctl offload namespace`` and ``unoffload namespace`` do, as functions over an API client.

Offloading only declares intent — the NamespaceOffloading of a namespace — and then, if asked, waits with a
deadline for the manager to converge, reporting each provider's twin as it goes. Input is checked before
anything is written (the namespace exists, the strategies and selector are well formed), and the API
server's own refusals (the mapping strategy is immutable) come back as one readable line.

Waiting must not be fooled by a status written for an earlier spec (the CRD has no observedGeneration):
a status counts only once it names the twin this spec implies and reports exactly the providers that the
VirtualNodes here select (:func:`verdict`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Literal

from liqo.api import names
from liqo.api.crds.schema import NAMESPACE_MAPPING_STRATEGIES, POD_OFFLOADING_STRATEGIES
from liqo.api.identity import read_identity
from liqo.api.offloadings import OffloadingPhase, TwinPhase
from liqo.api.resources import NAMESPACE_OFFLOADINGS, VIRTUAL_NODES
from liqo.kube.client import KubeClient
from liqo.kube.errors import ApiError, InvalidError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, terminating
from liqo.kube.waiting import WaitTimeout, changes_only, poll_until
from liqo.offloading.consumer_namespaces import selected_providers, twin_name

Progress = Callable[[str], None]

OFFLOAD_TIMEOUT = 60.0
UNOFFLOAD_TIMEOUT = 60.0


class OffloadingError(RuntimeError):
    """An offloading operation cannot proceed or did not converge; the message says why."""


def parse_selector(pairs: Iterable[str]) -> dict[str, str]:
    """``["k=v", ...]`` → ``{"k": "v"}`` (pure).

    Raises:
        OffloadingError: a pair without ``=``, with an empty key, or a key given twice with two values.
    """
    selector: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise OffloadingError(f"--selector {pair!r} must be key=value")
        if selector.get(key, value) != value:
            raise OffloadingError(f"--selector gives {key} twice: {selector[key]!r} and {value!r}")
        selector[key] = value
    return selector


def _check(value: str, allowed: tuple[str, ...], option: str) -> str:
    if value not in allowed:
        raise OffloadingError(f"{option} must be {', '.join(allowed[:-1])} or {allowed[-1]}, not {value!r}")
    return value


def check_strategies(*, pod_offloading_strategy: str | None, namespace_mapping_strategy: str | None) -> None:
    """Refuse a strategy that is none of the allowed values (None: not given) (pure).

    Raises:
        OffloadingError: naming the option and the allowed values.
    """
    if pod_offloading_strategy is not None:
        _check(pod_offloading_strategy, POD_OFFLOADING_STRATEGIES, "--pod-offloading-strategy")
    if namespace_mapping_strategy is not None:
        _check(namespace_mapping_strategy, NAMESPACE_MAPPING_STRATEGIES, "--namespace-mapping-strategy")


def offloading_manifest(
    *,
    namespace: str,
    pod_offloading_strategy: str,
    namespace_mapping_strategy: str,
    cluster_selector: Mapping[str, str],
) -> Obj:
    """The NamespaceOffloading of ``namespace`` (pure).

    An empty selector is left out rather than sent as ``{}``: server-side apply turns an applied empty map
    that replaces a non-empty one into ``null``, which the schema refuses; absent means "every provider".

    Raises:
        OffloadingError: a strategy that is none of the allowed values.
    """
    spec: Obj = {
        "podOffloadingStrategy": _check(
            pod_offloading_strategy, POD_OFFLOADING_STRATEGIES, "--pod-offloading-strategy"
        ),
        "namespaceMappingStrategy": _check(
            namespace_mapping_strategy, NAMESPACE_MAPPING_STRATEGIES, "--namespace-mapping-strategy"
        ),
    }
    if cluster_selector:
        spec["clusterSelector"] = dict(cluster_selector)
    return {
        "apiVersion": NAMESPACE_OFFLOADINGS.api_version,
        "kind": NAMESPACE_OFFLOADINGS.kind,
        "metadata": {"name": names.OFFLOADING, "namespace": namespace},
        "spec": spec,
    }


def refusal(error: ApiError) -> str:
    """The reasons in a 422 answer, without the API server's preamble (``... is invalid: <nil>: ...``)."""
    causes = (error.body.get("details") or {}).get("causes") or []
    messages = [str(c.get("message")) for c in causes if isinstance(c, dict) and c.get("message")]
    return "; ".join(messages) or error.message


def report(offloading: Obj) -> Obj:
    """What a person or a script wants to know of a NamespaceOffloading (pure)."""
    spec = offloading.get("spec") or {}
    status = offloading.get("status") or {}
    return {
        "namespace": offloading["metadata"]["namespace"],
        "podOffloadingStrategy": spec.get("podOffloadingStrategy", ""),
        "namespaceMappingStrategy": spec.get("namespaceMappingStrategy", ""),
        "clusterSelector": spec.get("clusterSelector") or {},
        "remoteNamespace": status.get("remoteNamespaceName", ""),
        "phase": status.get("offloadingPhase", ""),
        "clusters": [
            {
                "clusterID": c.get("clusterID", ""),
                "clusterName": c.get("clusterName", ""),
                "remoteNamespace": c.get("remoteNamespace", ""),
                "phase": c.get("phase", ""),
                "message": c.get("message", ""),
            }
            for c in status.get("remoteNamespacesConditions") or []
        ],
    }


def describe(offloading: Obj) -> str:
    """The phase, then one ``provider: phase (message)`` per provider (pure)."""
    summary = report(offloading)
    clusters = "; ".join(_line(c) for c in summary["clusters"]) or "no provider reported yet"
    return f"{summary['phase'] or 'no status yet'}: {clusters}"


def _line(cluster: Mapping[str, str]) -> str:
    text = f"{cluster['clusterName'] or cluster['clusterID']} {cluster['phase']}"
    return text + (f" ({cluster['message']})" if cluster["message"] else "")


Verdict = Literal["wait", "ready"]


def verdict(offloading: Obj, *, home_cluster_id: str, expected: set[str]) -> Verdict:
    """Whether an offloading is done, still converging, or failed (pure).

    ``expected`` is the set of providers its selector picks; a status reporting another set, or another
    twin name, predates the current spec and says nothing yet.

    Raises:
        OffloadingError: no provider selected, a twin in Conflict, or every twin failed.
    """
    status = offloading.get("status") or {}
    namespace = offloading["metadata"]["namespace"]
    conditions = status.get("remoteNamespacesConditions") or []
    if status.get("remoteNamespaceName") != twin_name(offloading, home_cluster_id=home_cluster_id):
        return "wait"
    if {c.get("clusterID") for c in conditions} != expected:
        return "wait"
    phase = status.get("offloadingPhase")
    if phase == OffloadingPhase.NO_CLUSTER_SELECTED:
        selector = (offloading.get("spec") or {}).get("clusterSelector") or {}
        raise OffloadingError(
            f"no provider matches the cluster selector {selector or '{}'} of {namespace}: "
            "peer with one first, or change --selector (see the labels with `kubectl get virtualnodes -A -o yaml`)"
        )
    conflicts = [c for c in conditions if c.get("phase") == TwinPhase.CONFLICT]
    if conflicts or phase == OffloadingPhase.ALL_FAILED:
        raise OffloadingError(f"offloading {namespace} failed: {describe(offloading)}")
    return "ready" if phase == OffloadingPhase.READY else "wait"


async def _home_cluster_id(client: KubeClient) -> str:
    identity = await read_identity(client)
    if identity is None:
        raise OffloadingError(f"liqo is not installed on this cluster ({client.server}): run `liqoctl install`")
    return identity.cluster_id


async def _get(client: KubeClient, namespace: str) -> Obj | None:
    return await client.get_or_none(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=namespace)


async def offload(
    client: KubeClient,
    namespace: str,
    *,
    pod_offloading_strategy: str | None = None,
    namespace_mapping_strategy: str | None = None,
    cluster_selector: Mapping[str, str] | None = None,
) -> Obj:
    """Apply the NamespaceOffloading of ``namespace``; return it as applied.

    Options left out keep their current value (or the default on a new offloading), so re-running with one
    option changes that one only.

    Raises:
        OffloadingError: liqo missing, no such namespace, bad input, or the API server refused the change.
    """
    check_strategies(
        pod_offloading_strategy=pod_offloading_strategy, namespace_mapping_strategy=namespace_mapping_strategy
    )
    await _home_cluster_id(client)
    try:
        home = await client.get(NAMESPACES, namespace)
    except NotFoundError:
        raise OffloadingError(f"namespace {namespace} does not exist: create it first") from None
    if terminating(home):
        raise OffloadingError(f"namespace {namespace} is being deleted")
    existing = await _get(client, namespace)
    if terminating(existing):
        raise OffloadingError(f"namespace {namespace} is being unoffloaded: wait until that is done")
    current = (existing or {}).get("spec") or {}
    manifest = offloading_manifest(
        namespace=namespace,
        pod_offloading_strategy=pod_offloading_strategy or current.get("podOffloadingStrategy") or "LocalAndRemote",
        namespace_mapping_strategy=namespace_mapping_strategy
        or current.get("namespaceMappingStrategy")
        or "DefaultName",
        cluster_selector=cluster_selector if cluster_selector is not None else current.get("clusterSelector") or {},
    )
    try:
        applied: Obj = await client.apply(NAMESPACE_OFFLOADINGS, manifest)
    except InvalidError as exc:
        raise OffloadingError(f"cannot offload {namespace}: {refusal(exc)}") from None
    return applied


async def wait_offloaded(
    client: KubeClient, namespace: str, *, timeout: float = OFFLOAD_TIMEOUT, progress: Progress = lambda _: None
) -> Obj:
    """Wait until ``namespace``'s offloading is Ready; return it.

    Raises:
        OffloadingError: it failed (see :func:`verdict`), vanished, or was not Ready within ``timeout``.
    """
    home_cluster_id = await _home_cluster_id(client)
    say, last = changes_only(progress), [""]

    async def ready() -> Obj | None:
        offloading = await _get(client, namespace)
        if offloading is None:
            raise OffloadingError(f"namespace {namespace} is not offloaded (its NamespaceOffloading is gone)")
        selector = (offloading.get("spec") or {}).get("clusterSelector") or {}
        nodes, _ = await client.list_all(VIRTUAL_NODES)
        expected = {p.cluster_id for p in selected_providers(nodes, selector)}
        if verdict(offloading, home_cluster_id=home_cluster_id, expected=expected) == "ready":
            return offloading
        last[0] = describe(offloading)
        say(f"waiting: {last[0]}")
        return None

    try:
        return await poll_until(ready, timeout=timeout, interval=0.2, message=f"{namespace} offloaded")
    except WaitTimeout:
        raise OffloadingError(f"{namespace} was not offloaded within {timeout:.0f}s: {last[0]}") from None


async def unoffload(
    client: KubeClient,
    namespace: str,
    *,
    wait: bool = True,
    timeout: float = UNOFFLOAD_TIMEOUT,
    progress: Progress = lambda _: None,
) -> None:
    """Delete ``namespace``'s NamespaceOffloading; with ``wait``, until it is gone (every twin deleted).

    Raises:
        OffloadingError: the namespace is not offloaded, or the twins were not all gone within ``timeout``.
    """
    await _home_cluster_id(client)
    existing = await _get(client, namespace)
    if existing is None:
        raise OffloadingError(f"namespace {namespace} is not offloaded")
    await client.delete(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=namespace, missing_ok=True)
    if not wait:
        return
    say, last = changes_only(progress), [""]

    async def gone() -> bool:
        offloading = await _get(client, namespace)
        if offloading is None:
            return True
        last[0] = describe(offloading)
        say(f"waiting for the twins to go: {last[0]}")
        return False

    try:
        await poll_until(gone, timeout=timeout, interval=0.2, message=f"the twins of {namespace} deleted")
    except WaitTimeout:
        raise OffloadingError(
            f"the twins of {namespace} were not all deleted within {timeout:.0f}s: {last[0]} "
            "(is the manager running, is every provider reachable? `liqoctl status`)"
        ) from None
