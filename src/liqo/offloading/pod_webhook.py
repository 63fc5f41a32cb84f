"""The pod mutating webhook: new pods in an offloaded namespace get the placement of its strategy.

Virtual nodes carry a ``NoExecute`` taint, so nothing lands on them by accident; a namespace's
NamespaceOffloading says where its pods may run, and this webhook writes that into each new pod as the
scheduler understands it (docs/offloading.md, "Pod placement"; where the API server serves
MutatingAdmissionPolicy, :mod:`liqo.offloading.placementpolicy` does the same in process and this webhook is not
registered):

- ``Remote``: the virtual-node toleration, and a required node affinity to virtual nodes (matching the
  ``clusterSelector``) only;
- ``LocalAndRemote``: the toleration, and real nodes OR the matching virtual nodes;
- ``Local``: real nodes only, no toleration.

Why a webhook rather than a controller that edits pods: scheduling fields are immutable once a pod exists,
and a pod bound before an edit would stay where it landed. Why ``failurePolicy: Fail``: a pod the webhook
missed would run on real nodes whatever the strategy says; refusing it (the ReplicaSet retries) is the
honest outcome, and the API server only calls us for namespaces labelled ``liqo.io/scheduling-enabled``,
so nothing else waits on the manager.

The transformation (:func:`pod_patch`) is a pure function of the pod and the NamespaceOffloading, applied
by the API server as an RFC 6902 JSONPatch; it is idempotent (a pod that already has our toleration and
affinity gets an empty patch), so a reinvocation or a pod copied from a mutated one is left alone.
The HTTP side (:class:`PodWebhook`) only parses the AdmissionReview, looks the NamespaceOffloading up in
an informer's cache, and answers. Every manager replica serves it (the API server may call any), so each
runs that informer itself, independently of leader election.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson
from aiohttp import web

from liqo.api import names
from liqo.api.resources import NAMESPACE_OFFLOADINGS
from liqo.kube.errors import KubeError, NotFoundError
from liqo.kube.informer import Informer, WatchClient
from liqo.kube.objects import Obj
from liqo.kube.resources import Resource, terminating
from liqo.offloading.registration import PATH

log = logging.getLogger(__name__)

MAX_REVIEW = 4 * 1024 * 1024
"""Largest AdmissionReview accepted: a pod may be up to the API server's 3 MiB request limit, plus the
envelope."""
LOOKUP_TIMEOUT = 2.0
"""Seconds a cache miss may spend asking the API server, well within the configuration's 5 s timeout."""

Strategy = Literal["Local", "Remote", "LocalAndRemote"]
STRATEGIES: tuple[Strategy, ...] = ("Local", "Remote", "LocalAndRemote")
DEFAULT_STRATEGY: Strategy = "LocalAndRemote"
"""The CRD's default, used when the field is absent (an object written before the default existed)."""

Requirement = dict[str, Any]
"""A NodeSelectorRequirement: ``{key, operator, values}``."""
JsonPatch = list[dict[str, Any]]

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_AFFINITY = "/spec/affinity"
_NODE_AFFINITY = f"{_AFFINITY}/nodeAffinity"
_REQUIRED_PATH = f"{_NODE_AFFINITY}/{_REQUIRED}"
_TERMS_PATH = f"{_REQUIRED_PATH}/nodeSelectorTerms"


# -- the placement of a strategy (pure) --------------------------------------------------------------------


def required_terms(*, strategy: Strategy, cluster_selector: Mapping[str, str]) -> list[list[Requirement]]:
    """The node selector terms of ``strategy``, ORed together; each is a list of ANDed requirements.

    Real nodes are "not labelled as virtual" (``NotIn``, which also matches nodes without the label),
    rather than some label of their own: local nodes are not ours to label.
    """
    local = [{"key": names.VIRTUAL_NODE_TYPE, "operator": "NotIn", "values": [names.VIRTUAL_NODE]}]
    remote = [{"key": names.VIRTUAL_NODE_TYPE, "operator": "In", "values": [names.VIRTUAL_NODE]}]
    remote += [{"key": key, "operator": "In", "values": [value]} for key, value in sorted(cluster_selector.items())]
    match strategy:
        case "Local":
            return [local]
        case "Remote":
            return [remote]
        case "LocalAndRemote":
            return [local, remote]


def _requirement_id(requirement: Mapping[str, Any]) -> tuple[Any, ...]:
    """What makes two requirements the same one (the order of ``values`` does not matter)."""
    return (requirement.get("key"), requirement.get("operator"), tuple(sorted(requirement.get("values") or [])))


def _implies(expressions: Sequence[Mapping[str, Any]], ours: Sequence[Requirement]) -> bool:
    """Whether a term with ``expressions`` already requires every one of ``ours`` (so it implies ``ours``)."""
    present = {_requirement_id(e) for e in expressions}
    return all(_requirement_id(r) in present for r in ours)


def merge_terms(existing: Sequence[Mapping[str, Any]], ours: Sequence[Sequence[Requirement]]) -> list[Obj]:
    """The pod's node selector terms AND ours, still as one list of ORed terms.

    Kubernetes ORs the terms of ``nodeSelectorTerms`` and ANDs the expressions inside a term, so
    ``(T1 or ... or Tn) and (S1 or ... or Sm)`` is distributed into the terms ``Ti and Sj`` (``Ti`` with
    ``Sj``'s expressions appended). For ``Remote`` and ``Local`` (one term of ours) that is simply our
    expressions added to each of the pod's terms. A term that already contains all of some ``Sj`` implies
    our requirement and is kept as it is, which makes the merge idempotent. Contradictory terms (a pod
    asking for virtual nodes in a ``Local`` namespace) are kept: they match no node, so such a pod stays
    Pending, as the namespace's strategy demands; dropping them could leave no term at all, which the API
    server rejects.
    """
    merged: list[Obj] = []
    for term in existing:
        expressions = list(term.get("matchExpressions") or [])
        if any(_implies(expressions, our) for our in ours):
            merged.append(dict(term))
            continue
        present = {_requirement_id(e) for e in expressions}
        for our in ours:
            extra = [dict(r) for r in our if _requirement_id(r) not in present]
            merged.append({**term, "matchExpressions": expressions + extra})
    return merged


def _tolerated(tolerations: Sequence[Mapping[str, Any]]) -> bool:
    wanted = names.virtual_node_toleration()
    return any(
        t.get("key") == wanted["key"]
        and (t.get("operator") or "Equal") == wanted["operator"]
        and t.get("value") == wanted["value"]
        and t.get("effect") == wanted["effect"]
        and t.get("tolerationSeconds") is None
        for t in tolerations
    )


class UnknownStrategy(ValueError):
    """The NamespaceOffloading names a strategy this version does not know (its CRD should have refused it)."""


def strategy_of(offloading: Mapping[str, Any]) -> tuple[Strategy, dict[str, str]]:
    """The pod strategy and cluster selector of a NamespaceOffloading.

    Raises:
        UnknownStrategy: the strategy is none of :data:`STRATEGIES`.
    """
    spec = offloading.get("spec") or {}
    strategy = spec.get("podOffloadingStrategy") or DEFAULT_STRATEGY
    for known in STRATEGIES:
        if strategy == known:
            return known, dict(spec.get("clusterSelector") or {})
    raise UnknownStrategy(f"unknown podOffloadingStrategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")


def pod_patch(*, pod: Mapping[str, Any], offloading: Mapping[str, Any] | None) -> JsonPatch:
    """The JSONPatch (RFC 6902) that gives ``pod`` the placement of its namespace's ``offloading``.

    Empty when there is nothing to do: no NamespaceOffloading, or one being deleted (the namespace is on
    its way back to plain local scheduling); a pod already bound (``spec.nodeName``: the scheduler will not
    look at it, and the virtual kubelet must not be surprised by a pod it never placed); a pod that has
    the toleration and affinity already.

    Raises:
        UnknownStrategy: see :func:`strategy_of`.
    """
    if offloading is None or terminating(offloading):
        return []
    spec = pod.get("spec")
    if not isinstance(spec, Mapping) or spec.get("nodeName"):
        return []
    strategy, selector = strategy_of(offloading)
    ops: JsonPatch = []
    if strategy != "Local":
        tolerations = spec.get("tolerations")
        if not tolerations:
            ops.append({"op": "add", "path": "/spec/tolerations", "value": [names.virtual_node_toleration()]})
        elif not _tolerated(tolerations):
            ops.append({"op": "add", "path": "/spec/tolerations/-", "value": names.virtual_node_toleration()})
    ops += _affinity_ops(spec, required_terms(strategy=strategy, cluster_selector=selector))
    return ops


def _affinity_ops(spec: Mapping[str, Any], ours: list[list[Requirement]]) -> JsonPatch:
    """Operations adding our terms at the shallowest missing level, or merging into the pod's own terms."""
    fresh = [{"matchExpressions": [dict(r) for r in term]} for term in ours]
    affinity = spec.get("affinity")
    if not affinity:
        return [{"op": "add", "path": _AFFINITY, "value": {"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": fresh}}}}]
    node_affinity = affinity.get("nodeAffinity")
    if not node_affinity:
        return [{"op": "add", "path": _NODE_AFFINITY, "value": {_REQUIRED: {"nodeSelectorTerms": fresh}}}]
    required = node_affinity.get(_REQUIRED)
    if not required:
        return [{"op": "add", "path": _REQUIRED_PATH, "value": {"nodeSelectorTerms": fresh}}]
    existing = required.get("nodeSelectorTerms") or []
    # No terms at all is invalid (the API server would refuse the pod anyway): ours stand alone.
    merged = merge_terms(existing, ours) if existing else fresh
    if merged == existing:
        return []
    return [{"op": "replace" if "nodeSelectorTerms" in required else "add", "path": _TERMS_PATH, "value": merged}]


# -- the AdmissionReview (pure) ----------------------------------------------------------------------------


class InvalidReview(ValueError):
    """The body is not an AdmissionReview v1 request (the answer is 400)."""


@dataclass(frozen=True)
class PodReview:
    """What the webhook needs of an AdmissionReview request."""

    uid: str
    namespace: str
    operation: str
    kind: str
    group: str
    sub_resource: str
    obj: Obj | None
    old_obj: Obj | None = None
    """The object before an UPDATE (None otherwise)."""

    @property
    def is_pod_create(self) -> bool:
        """Whether this is the creation of a pod (the only request the configuration sends us)."""
        return self.operation == "CREATE" and self.group == "" and self.kind == "Pod" and not self.sub_resource


def parse_review(body: bytes) -> PodReview:
    """The request of an ``admission.k8s.io/v1`` AdmissionReview.

    Raises:
        InvalidReview: not JSON, not an AdmissionReview v1, or a request without a uid.
    """
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidReview("the body is not valid JSON") from exc
    if not isinstance(review, dict):
        raise InvalidReview("the body must be a JSON object")
    if review.get("apiVersion") != "admission.k8s.io/v1" or review.get("kind") != "AdmissionReview":
        raise InvalidReview("expected an AdmissionReview of apiVersion admission.k8s.io/v1")
    request = review.get("request")
    if not isinstance(request, dict):
        raise InvalidReview("the AdmissionReview has no request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise InvalidReview("the AdmissionReview request has no uid")
    kind = request.get("kind")
    obj = request.get("object")
    old = request.get("oldObject")
    if not isinstance(kind, dict) or not all(o is None or isinstance(o, dict) for o in (obj, old)):
        raise InvalidReview("the AdmissionReview request needs a kind and an object")
    return PodReview(
        uid=uid,
        namespace=str(request.get("namespace") or ""),
        operation=str(request.get("operation") or ""),
        kind=str(kind.get("kind") or ""),
        group=str(kind.get("group") or ""),
        sub_resource=str(request.get("subResource") or ""),
        obj=obj,
        old_obj=old,
    )


def review_response(*, uid: str, patch: JsonPatch | None = None, denied: tuple[int, str] | None = None) -> Obj:
    """The AdmissionReview answer: allowed (with ``patch`` if non-empty), or refused with (code, message)."""
    response: Obj = {"uid": uid, "allowed": denied is None}
    if denied is not None:
        code, message = denied
        response["status"] = {"code": code, "message": message}
    elif patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(patch)).decode()
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


# -- serving (I/O) ----------------------------------------------------------------------------------------


class WebhookClient(WatchClient, Protocol):
    """The API calls of the webhook: list+watch for the informer, a get for a cache miss."""

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        """One object."""


NOT_SYNCED = (
    "liqo's pod webhook has not loaded the NamespaceOffloadings yet (the manager is starting): retry in a few seconds"
)


class PodWebhook:
    """``POST /mutate/pods`` over a cache of every NamespaceOffloading.

    :meth:`attach` adds the route to an application and ties the informer's life to the application's,
    so it runs in every replica that serves the endpoint.
    """

    def __init__(self, *, client: WebhookClient) -> None:
        self._client = client
        self.informer = Informer(client=client, resource=NAMESPACE_OFFLOADINGS, name="namespaceoffloadings (webhook)")

    def attach(self, app: web.Application) -> None:
        """Serve :data:`PATH` on ``app`` and run the informer while ``app`` runs."""
        app.router.add_post(PATH, self.handle)
        app.cleanup_ctx.append(self._informing)

    async def _informing(self, _: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(self.informer.run(), name="informer namespaceoffloadings (webhook)")
        yield
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    async def handle(self, request: web.Request) -> web.Response:
        """Answer one AdmissionReview."""
        return await serve_review(request, self.review)

    async def review(self, review: PodReview) -> Obj:
        """The answer to ``review``: the patch of the namespace's strategy, or why the pod must wait."""
        if not review.is_pod_create or review.obj is None:
            return review_response(uid=review.uid)
        if not self.informer.has_synced:
            log.warning("pod creation in %s refused: the NamespaceOffloading cache is not synced", review.namespace)
            return review_response(uid=review.uid, denied=(503, NOT_SYNCED))
        try:
            offloading = await self._offloading(review.namespace)
            patch = pod_patch(pod=review.obj, offloading=offloading)
        except (KubeError, TimeoutError, UnknownStrategy) as exc:
            message = f"liqo's pod webhook cannot place pods in namespace {review.namespace}: {exc}"
            log.warning("%s", message)
            return review_response(uid=review.uid, denied=(500, message))
        if patch:
            log.debug("pod %s/%s: %s", review.namespace, _pod_name(review.obj), patch)
        return review_response(uid=review.uid, patch=patch)

    async def _offloading(self, namespace: str) -> Obj | None:
        cached = self.informer.store.get(f"{namespace}/{names.OFFLOADING}")
        if cached is not None:
            return cached
        # We are only called for namespaces labelled for offloading, which have a NamespaceOffloading but
        # for a moment after it is created (or while it goes away): ask the server rather than let a pod
        # through unplaced because our watch is a few milliseconds behind.
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT):
                return await self._client.get(NAMESPACE_OFFLOADINGS, names.OFFLOADING, namespace=namespace)
        except NotFoundError:
            return None


async def serve_review(request: web.Request, review: Callable[[PodReview], Awaitable[Obj]]) -> web.Response:
    """Parse the AdmissionReview of ``request`` and answer it with ``review`` (400/413 for what is none)."""
    try:
        parsed = parse_review(await request.clone(client_max_size=MAX_REVIEW).read())
    except web.HTTPRequestEntityTooLarge:
        return json_response({"reason": f"the body is larger than {MAX_REVIEW} bytes"}, status=413)
    except InvalidReview as exc:
        log.info("%s from %s refused (400): %s", request.path, request.remote, exc)
        return json_response({"reason": str(exc)}, status=400)
    return json_response(await review(parsed))


def _pod_name(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return str(meta.get("name") or f"{meta.get('generateName') or ''}*")


def json_response(body: Obj, *, status: int = 200) -> web.Response:
    """A JSON answer."""
    return web.Response(body=orjson.dumps(body), status=status, content_type="application/json")
