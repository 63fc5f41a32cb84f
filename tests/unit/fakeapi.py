"""One in-memory Kubernetes API for the unit tests, where each module used to write a fake of its own.

Why one: the fakes each answered a few verbs their own way (a list that never changed, a delete that only
marked, a create that never conflicted...), so a test passed against what its fake happened to do rather than
what an API server does. This one does what the API server does for the verbs liqo's code calls, and nothing
more:

- objects by (resource, namespace, name); every write gives the object a new ``resourceVersion`` (one counter
  for the whole API, as etcd's) and a created object a ``uid``;
- ``get``/``patch``/``replace``/``delete`` of a missing object raise :class:`NotFoundError`; ``create`` of an
  existing name, a write on a stale ``metadata.resourceVersion`` and a delete with another ``uid`` raise
  :class:`ConflictError`;
- ``list_all`` filters by namespace, label selector (``k=v``, ``k!=v``, ``k``, ``!k``, comma-joined) and
  field selector (``spec.nodeName=n``, ``metadata.name!=x``), applies ``transform`` as for an informer's list;
- ``watch`` streams ``ADDED``/``MODIFIED``/``DELETED`` to every watcher of the resource and namespace, from
  the moment it starts (the informers under test list first);
- a pod (unless deleted with grace 0) or an object with finalizers is only marked by a delete
  (``deletionTimestamp``), as the kubelet or the finalizer's owner must finish it; a Secret's ``stringData``
  is stored base64-encoded in ``data``.

Every answer is a copy of what the API holds (as decoded JSON is), never an alias a caller could change it
through. Server-side apply is approximated: the applied object's fields are merged into the stored one (a status apply
replaces the status whole, as one field manager owning it does). What a test scripts, it scripts here too:
:meth:`put`/:meth:`remove` change what the API holds as another writer would (``notify=False``: a watch that
has not delivered it yet), :meth:`refuse` makes a verb fail (before or after it takes effect), ``listing``
holds lists back until set, and ``calls`` records every request in order, for the tests of what the code asks.
"""

from __future__ import annotations

import asyncio
import base64
import copy
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from liqo.kube.client import TOO_MANY_REQUESTS, status_body
from liqo.kube.errors import ApiError, ConflictError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import PODS, Resource
from tests.shared import apply_patch

DELETED_AT = "2030-01-01T00:00:00Z"
"""The ``deletionTimestamp`` a marking delete sets."""


@dataclass
class Call:
    """One request: its verb (``get``, ``list``, ``watch``, ``create``, ``replace``, ``patch``, ``apply``,
    ``delete``), the resource's plural, the namespace and name it addressed, what it sent, and whether a write
    took effect (``landed``; whatever the caller was answered)."""

    verb: str
    plural: str
    namespace: str | None = None
    name: str | None = None
    body: Any = None
    options: dict[str, Any] = field(default_factory=dict)
    landed: bool = False

    @property
    def key(self) -> str:
        """``namespace/name``, or ``name`` (as :func:`liqo.kube.resources.object_key`)."""
        return f"{self.namespace}/{self.name}" if self.namespace else str(self.name)


@dataclass
class _Refusal:
    error: Exception
    times: int | None
    after: bool


def selects(selector: str | None, obj: Obj) -> bool:
    """Whether a label selector of equalities and existence tests selects ``obj`` (pure)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if term.startswith("!"):
            if term[1:] in labels:
                return False
        elif "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


def _fields_select(selector: str | None, obj: Obj) -> bool:
    """Whether a field selector (``path=value``, ``path!=value``, comma-joined) selects ``obj`` (pure)."""
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        negated = "!=" in term
        path, value = term.split("!=" if negated else "==" if "==" in term else "=", 1)
        found: Any = obj
        for part in path.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        if (str(found if found is not None else "") == value) == negated:
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` merged into ``target`` (``None`` removes a member; pure)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


class FakeApi:
    """An in-memory API server for :class:`liqo.kube.client.KubeClient`'s verbs (see the module's docstring)."""

    def __init__(
        self,
        *objects: tuple[Resource, Obj],
        listing: bool = True,
        lands: bool = True,
        answer: Callable[[str, str, Any], Obj] | None = None,
    ) -> None:
        self.objects: dict[tuple[str, str | None, str], Obj] = {}
        """What the API holds, by (plural, namespace, name); tests read it, and write it with :meth:`put`."""
        self.calls: list[Call] = []
        self.listing = asyncio.Event()
        """Lists answer once set (``listing=False``: an API that has not answered yet, until the test sets it)."""
        if listing:
            self.listing.set()
        self.version = 0
        self._uids = 0
        self._watchers: list[tuple[str, str | None, asyncio.Queue[Obj]]] = []
        self._refusals: dict[tuple[str, str, str | None], _Refusal] = {}
        self.lands = lands
        """Whether writes take effect. Off, every write is recorded and answered with what was sent, and nothing
        changes: for the tests that land what they choose themselves (:meth:`put`), as a reconcile's test does."""
        self.answer = answer
        """Answers :meth:`request` (a raw request: a TokenRequest, a SelfSubjectReview), given the method, the path
        and the body; without it a request is a 404."""
        for resource, obj in objects:
            self.put(resource, obj)

    # -- what a test does ----------------------------------------------------------------------------------

    def put(self, resource: Resource, obj: Obj, *, notify: bool = True) -> Obj:
        """Store ``obj`` as another writer would (a new resourceVersion; a uid if it has none), and tell the
        watchers (``ADDED`` or ``MODIFIED``) unless ``notify`` is false. Returns the stored object (``obj``)."""
        meta = obj.setdefault("metadata", {})
        key = self._key(resource, meta.get("namespace"), meta["name"])
        kind = "MODIFIED" if key in self.objects else "ADDED"
        if "uid" not in meta:
            self._uids += 1
            meta["uid"] = f"uid-{self._uids}"
        self.version += 1
        meta["resourceVersion"] = str(self.version)
        self.objects[key] = obj
        if notify:
            self._notify(resource, kind, obj)
        return obj

    def remove(self, resource: Resource, name: str, *, namespace: str | None = None, notify: bool = True) -> Obj:
        """Take an object away as another writer's delete would (``DELETED`` to the watchers)."""
        obj = self.objects.pop(self._key(resource, namespace, name))
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        if notify:
            self._notify(resource, "DELETED", obj)
        return obj

    def stored(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj | None:
        return self.objects.get(self._key(resource, namespace, name))

    def refuse(
        self,
        verb: str,
        resource: Resource,
        error: Exception,
        *,
        name: str | None = None,
        times: int | None = None,
        after: bool = False,
    ) -> None:
        """Make ``verb`` on ``resource`` (of that ``name`` only, if given) raise ``error``, ``times`` times or until
        :meth:`allow`; ``after``: once the request took effect (an answer lost on the way back)."""
        self._refusals[(verb, resource.plural, name)] = _Refusal(error, times, after)

    def allow(self, verb: str, resource: Resource, *, name: str | None = None) -> None:
        self._refusals.pop((verb, resource.plural, name), None)

    def called(self, verb: str, resource: Resource | None = None) -> list[Call]:
        """The requests of ``verb`` (on ``resource``), in order."""
        return [c for c in self.calls if c.verb == verb and (resource is None or c.plural == resource.plural)]

    # -- what the code under test calls --------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj:
        call = self._record(Call("get", resource.plural, namespace, name))
        return await self._refused(call, lambda: self._found(resource, namespace, name))

    async def get_or_none(self, resource: Resource, name: str, *, namespace: str | None = None) -> Obj | None:
        try:
            return await self.get(resource, name, namespace=namespace)
        except NotFoundError:
            return None

    async def list_all(
        self,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        transform: Callable[[Obj], Obj] | None = None,
    ) -> tuple[list[Obj], str]:
        call = Call(
            "list",
            resource.plural,
            namespace,
            options={"label_selector": label_selector, "field_selector": field_selector},
        )
        self._record(call)
        await self.listing.wait()
        items = [
            copy.deepcopy(obj)
            for (plural, ns, _), obj in self.objects.items()
            if plural == resource.plural
            and (namespace is None or ns == namespace)
            and selects(label_selector, obj)
            and _fields_select(field_selector, obj)
        ]
        return [transform(obj) for obj in items] if transform else items, str(self.version)

    async def watch(
        self,
        resource: Resource,
        *,
        resource_version: str = "",
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        **_: Any,
    ) -> AsyncIterator[Obj]:
        self._record(Call("watch", resource.plural, namespace, options={"resource_version": resource_version}))
        queue: asyncio.Queue[Obj] = asyncio.Queue()
        watcher = (resource.plural, namespace, queue)
        self._watchers.append(watcher)
        try:
            while True:
                event = copy.deepcopy(await queue.get())
                if selects(label_selector, event["object"]) and _fields_select(field_selector, event["object"]):
                    yield event
        finally:
            self._watchers.remove(watcher)

    async def create(self, resource: Resource, obj: Obj, *, namespace: str | None = None, dry_run: bool = False) -> Obj:
        meta = obj.get("metadata") or {}
        ns = namespace or meta.get("namespace") if resource.namespaced else None
        call = self._record(
            Call("create", resource.plural, ns, meta.get("name"), obj, {"dry_run": dry_run, "namespace": namespace})
        )
        return await self._refused(call, lambda: self._create(resource, obj, ns, dry_run=dry_run))

    async def replace(
        self, resource: Resource, obj: Obj, *, subresource: str | None = None, dry_run: bool = False
    ) -> Obj:
        meta = obj["metadata"]
        call = self._record(
            Call("replace", resource.plural, meta.get("namespace"), meta["name"], obj, {"subresource": subresource})
        )

        def replace() -> Obj:
            current = self._found(resource, meta.get("namespace"), meta["name"])
            self._precondition(current, meta.get("resourceVersion"))
            if subresource is not None:
                return self._write(resource, current | {subresource: copy.deepcopy(obj.get(subresource))}, dry_run)
            kept = {"uid": current["metadata"]["uid"]}
            return self._write(resource, copy.deepcopy(obj) | {"metadata": meta | kept}, dry_run)

        return await self._refused(call, replace)

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Any,
        *,
        namespace: str | None = None,
        patch_type: str = "merge",
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        call = self._record(Call("patch", resource.plural, namespace, name, patch, {"patch_type": patch_type}))

        def patched() -> Obj:
            current = self._found(resource, namespace, name)
            if patch_type == "json":
                return self._write(resource, apply_patch(current, patch), dry_run)
            self._precondition(current, ((patch.get("metadata") or {}).get("resourceVersion")))
            return self._write(resource, merge_patch(current, patch), dry_run)

        return await self._refused(call, patched)

    async def apply(
        self,
        resource: Resource,
        obj: Obj,
        *,
        field_manager: str = "liqo",
        force: bool = True,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        meta = obj["metadata"]
        namespace = meta.get("namespace") if resource.namespaced else None
        call = self._record(Call("apply", resource.plural, namespace, meta["name"], obj, {"subresource": subresource}))

        def applied() -> Obj:
            current = self.stored(resource, meta["name"], namespace=namespace)
            if current is None:
                if subresource is not None:
                    raise NotFoundError(404, "NotFound", f"{resource.plural} {meta['name']} not found")
                return self._create(resource, obj, namespace, dry_run=dry_run)
            self._precondition(current, meta.get("resourceVersion"))
            if subresource == "status":
                return self._write(resource, current | {"status": copy.deepcopy(obj.get("status") or {})}, dry_run)
            desired = {k: v for k, v in obj.items() if k != "metadata"} | {
                "metadata": {k: v for k, v in meta.items() if k != "resourceVersion"}
            }
            return self._write(resource, merge_patch(current, desired), dry_run)

        return await self._refused(call, applied)

    async def apply_status(
        self,
        resource: Resource,
        *,
        name: str,
        namespace: str | None = None,
        status: Obj,
        resource_version: str | None = None,
    ) -> Obj:
        body = status_body(resource, name=name, namespace=namespace, status=status, resource_version=resource_version)
        return await self.apply(resource, body, subresource="status")

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
        uid: str | None = None,
        missing_ok: bool = False,
    ) -> Obj | None:
        options = {"grace_period_seconds": grace_period_seconds, "uid": uid}
        call = self._record(Call("delete", resource.plural, namespace, name, options=options))

        def deleted() -> Obj:
            current = self._found(resource, namespace, name)
            if uid is not None and current["metadata"].get("uid") != uid:
                raise ConflictError(409, "Conflict", f"{resource.plural} {name}: the uid precondition failed")
            graceful = resource.plural == "pods" and grace_period_seconds != 0
            if current["metadata"].get("finalizers") or graceful:
                if "deletionTimestamp" in current["metadata"]:
                    return current
                marked = current["metadata"] | {"deletionTimestamp": DELETED_AT}
                return self._write(resource, current | {"metadata": marked}, dry_run=False)
            return self.remove(resource, name, namespace=namespace)

        try:
            return await self._refused(call, deleted)
        except NotFoundError:
            if missing_ok:
                return None
            raise

    async def evict(self, name: str, *, namespace: str, uid: str | None = None) -> bool:
        """As the Eviction API: the pod deleted (marked) unless a scripted refusal (a budget's 429) says not now."""
        call = self._record(Call("evict", "pods", namespace, name, options={"uid": uid}))

        def evicted() -> Obj:
            current = self._found(PODS, namespace, name)
            if uid is not None and current["metadata"].get("uid") != uid:
                raise ConflictError(409, "Conflict", f"pods {name}: the uid precondition failed")
            if "deletionTimestamp" in current["metadata"]:
                return current
            return self._write(
                PODS, current | {"metadata": current["metadata"] | {"deletionTimestamp": DELETED_AT}}, False
            )

        try:
            await self._refused(call, evicted)
        except (NotFoundError, ConflictError):
            return True
        except ApiError as exc:
            if exc.status == TOO_MANY_REQUESTS:
                return False
            raise
        return True

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        """A raw request, answered by :attr:`answer`."""
        call = self._record(Call("request", "", name=path, body=body, options={"method": method}))
        if self.answer is None:
            raise NotFoundError(404, "NotFound", f"{method} {path}")
        answer, call.landed = self.answer(method, path, body), True
        return answer

    # -- inside --------------------------------------------------------------------------------------------

    def _key(self, resource: Resource, namespace: str | None, name: str) -> tuple[str, str | None, str]:
        return (resource.plural, namespace if resource.namespaced else None, name)

    def _record(self, call: Call) -> Call:
        self.calls.append(call)
        return call

    def _found(self, resource: Resource, namespace: str | None, name: str) -> Obj:
        obj = self.stored(resource, name, namespace=namespace)
        if obj is None:
            raise NotFoundError(404, "NotFound", f'{resource.plural} "{name}" not found')
        return obj

    def _precondition(self, current: Obj, resource_version: str | None) -> None:
        if resource_version is not None and resource_version != current["metadata"]["resourceVersion"]:
            name = current["metadata"]["name"]
            raise ConflictError(409, "Conflict", f"{name}: the object has been modified; resourceVersion moved")

    def _create(self, resource: Resource, obj: Obj, namespace: str | None, *, dry_run: bool) -> Obj:
        if not self.lands:
            name = (obj.get("metadata") or {}).get("name")
            if name and self.stored(resource, name, namespace=namespace) is not None:
                raise ConflictError(409, "AlreadyExists", f'{resource.plural} "{name}" already exists')
            return copy.deepcopy(obj)
        made = copy.deepcopy(obj)
        meta = made.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            self._uids += 1
            meta["name"] = f"{meta['generateName']}{self._uids:05d}"
        if namespace is not None:
            meta["namespace"] = namespace
        if self.stored(resource, meta["name"], namespace=namespace) is not None:
            raise ConflictError(409, "AlreadyExists", f'{resource.plural} "{meta["name"]}" already exists')
        if "stringData" in made:
            encoded = {k: base64.b64encode(v.encode()).decode() for k, v in made.pop("stringData").items()}
            made["data"] = (made.get("data") or {}) | encoded
        meta.pop("resourceVersion", None)
        meta.pop("uid", None)
        return made if dry_run else self.put(resource, made)

    def _write(self, resource: Resource, obj: Obj, dry_run: bool) -> Obj:
        """A new version of an object: a copy of its own, as an API server's answer is (never an alias of
        the version before, which a cache under test may hold)."""
        return obj if dry_run else self.put(resource, copy.deepcopy(obj))

    def _notify(self, resource: Resource, kind: str, obj: Obj) -> None:
        namespace = obj["metadata"].get("namespace")
        for plural, watched, queue in self._watchers:
            if plural == resource.plural and watched in (None, namespace):
                queue.put_nowait({"type": kind, "object": obj})

    async def _refused(self, call: Call, act: Callable[[], Obj]) -> Obj:
        """Run a request's ``act``, unless a refusal stands in its way (before it, or after it took effect)."""
        keys = ((call.verb, call.plural, call.name), (call.verb, call.plural, None))
        key = next((k for k in keys if k in self._refusals), None)
        refusal = self._refusals.get(key) if key is not None else None
        if key is not None and refusal is not None and refusal.times is not None:
            refusal.times -= 1
            if refusal.times <= 0:
                del self._refusals[key]
        if refusal is not None and not refusal.after:
            raise refusal.error
        if self.lands or call.verb in ("get", "create"):  # an unlanded create is refused on a name taken
            done = copy.deepcopy(act())
        else:
            done = copy.deepcopy(call.body) if call.verb in ("replace", "apply") else {}
        call.landed = self.lands
        if refusal is not None:
            raise refusal.error
        return done
