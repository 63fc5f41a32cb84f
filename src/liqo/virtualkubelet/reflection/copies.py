"""Objects copied from an offloaded namespace into its twin: ConfigMaps, Secrets, Services, Ingresses, claims.

A pod running on the provider mounts ConfigMaps and Secrets by name from its (twin) namespace and reaches
Services by name, so each is copied there (same name, content, labels and annotations, marked
``names.ORIGIN``), updated when it changes and deleted when it goes — or when it stops qualifying
(``liqo.io/skip-reflection``, the policy). Every kind copied this way is a :class:`CopiedKind`: its resource
and four pure functions from its forge module; the reconcile below is the same for all.

One key per object, ``(plural, home namespace, name)``. The reconcile reads both caches and does one step, so
a restart converges from whatever it finds; nothing that does not carry our marker (a namesake made on the
provider) is ever updated or deleted — it gets a ``ReflectionConflict`` Event on the home object instead.
Copies are written with create and replace at the cached resourceVersion (:func:`converge_copy`), not
server-side apply: a create fails on a namesake the cache has not shown yet, where an apply would take it over.

What is not copied is said at home, never silently dropped (:class:`Refusals`): a home object of a kind we
copy that we do not (an ``ExternalName`` Service, an Ingress without a class) gets a Warning Event
``NotReflected``; a copy the provider's API server refuses (its admission: an Ingress on a class its policy
does not offer us) gets ``ProviderRefused`` with the provider's message, and is written again with a capped
backoff, as the provider's policy may change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from liqo.api import names
from liqo.kube.controller import Result
from liqo.kube.informer import Informer
from liqo.kube.objects import Obj
from liqo.kube.resources import CONFIGMAPS, INGRESSES, PERSISTENT_VOLUME_CLAIMS, SECRETS, SERVICES, Resource
from liqo.virtualkubelet.forge import claims, common, configdata, ingresses, services, tokens
from liqo.virtualkubelet.reflection.manager import NamespacePair, ReflectionManager, Reflector
from liqo.virtualkubelet.reflection.steps import (
    ReflectionPolicy,
    Refusals,
    converge_copy,
    delete_copy,
    typed,
)

ObjectKey = tuple[str, str, str]
"""``(plural, home namespace, name)`` of a copied object."""
NOT_REFLECTED = "NotReflected"


@dataclass(frozen=True, slots=True)
class CopiedKind:
    """A kind copied into twins, and the pure functions that say how (from its forge module).

    Attributes:
        resource: The kind.
        reflectable: Whether a home object is ever copied, whatever the policy.
        copy: The copy of a home object in a twin: ``copy(obj, namespace=, home_cluster_id=)``.
        is_current: Whether the copy as read already says what the desired one says.
        must_replace: Whether the copy cannot be updated into the desired one (deleted and made anew).
        in_twin: The label selector of what the twin's cache of the kind holds (None: all).
        refusal: Why a reflectable home object is not copied, said at home (None: it is).
    """

    resource: Resource
    reflectable: Callable[[Obj, str], bool]
    """Whether a home object is ever copied to the provider of that cluster ID, whatever the policy."""
    copy: Callable[..., Obj]
    is_current: Callable[[Obj, Obj], bool]
    must_replace: Callable[[Obj, Obj], bool]
    in_twin: str | None = None
    refusal: Callable[[Obj], str | None] = lambda _obj: None


def copied_kinds(policy: ReflectionPolicy) -> list[CopiedKind]:
    """Every kind copied as it is, the Ingress copy mapping classes by ``policy.ingress_classes``."""
    return [
        *CONFIG_KINDS,
        CopiedKind(
            resource=SERVICES,
            reflectable=lambda obj, _provider: services.reflectable(obj),
            copy=services.reflected_service,
            is_current=services.service_is_current,
            must_replace=services.must_replace,
            refusal=services.refusal,
        ),
        CopiedKind(
            resource=INGRESSES,
            reflectable=lambda obj, _provider: ingresses.reflectable(obj),
            copy=lambda obj, **where: ingresses.reflected_ingress(obj, classes=policy.ingress_classes, **where),
            is_current=ingresses.ingress_is_current,
            must_replace=ingresses.must_replace,
            refusal=ingresses.refusal,
        ),
    ]


def claims_kind(*, node_name: str, provider: str, offered: Callable[[], Sequence[str]]) -> CopiedKind:
    """Claims of the virtual class placed on ``node_name``, copied with the class ``provider`` offers for them.

    ``offered``: the provider's classes, as the virtual node says them now (they follow the accepted offer).
    """

    def copy(claim: Obj, *, namespace: str, home_cluster_id: str) -> Obj:
        storage_class = claims.provider_class(claim, offered())
        assert storage_class is not None  # refusal() said why otherwise, and nothing is copied
        return claims.reflected_claim(
            claim, namespace=namespace, home_cluster_id=home_cluster_id, storage_class=storage_class
        )

    return CopiedKind(
        resource=PERSISTENT_VOLUME_CLAIMS,
        reflectable=lambda obj, _provider: claims.reflectable(obj, node_name=node_name),
        copy=copy,
        is_current=claims.claim_is_current,
        must_replace=claims.never_replaced,
        refusal=lambda obj: claims.refusal(obj, offered(), provider=provider),
    )


CONFIG_KINDS = (
    CopiedKind(
        resource=CONFIGMAPS,
        reflectable=lambda obj, provider: configdata.reflectable(obj, resource=CONFIGMAPS, provider_id=provider),
        copy=lambda obj, **where: configdata.reflected_copy(obj, resource=CONFIGMAPS, **where),
        is_current=configdata.copy_is_current,
        must_replace=configdata.must_replace,
    ),
    CopiedKind(
        resource=SECRETS,
        reflectable=lambda obj, provider: configdata.reflectable(obj, resource=SECRETS, provider_id=provider),
        copy=lambda obj, **where: configdata.reflected_copy(obj, resource=SECRETS, **where),
        is_current=configdata.copy_is_current,
        must_replace=configdata.must_replace,
        # The pod-token Secrets are the token reflector's, cached apart without their data: a home Secret of
        # the same name (a digest of a pod's) is refused by the provider as a namesake would be.
        in_twin=tokens.NOT_TOKEN_SECRETS,
    ),
)


def _in_twin(pair: NamespacePair, kind: CopiedKind) -> Informer:
    """The twin's cache of ``kind``."""
    return pair.remote(kind.resource, label_selector=kind.in_twin)


class CopyReflector(Reflector[ObjectKey]):
    """Keeps the copies of one virtual node's offloaded namespaces in step with their home objects."""

    def __init__(
        self,
        *,
        manager: ReflectionManager,
        policy: ReflectionPolicy,
        kinds: Iterable[CopiedKind],
    ) -> None:
        super().__init__(manager, reflects="copies", workers=3)
        self._policy = policy
        self._kinds = {kind.resource.plural: kind for kind in kinds}
        self._refusals = Refusals(manager.events)

    def start_namespace(self, pair: NamespacePair) -> None:
        """Watch every copied kind on both sides: an event on either re-queues the object of that name."""
        home_namespace = pair.home_namespace
        for plural, kind in self._kinds.items():
            for informer in (pair.home(kind.resource), _in_twin(pair, kind)):
                self.controller.watch(informer, _keyer(plural, home_namespace, self._manager.provider_id))

    def namespace_synced(self, pair: NamespacePair) -> None:
        """Reconcile every object seen on either side again, with both caches listed."""
        for plural, kind in self._kinds.items():
            found = {obj["metadata"]["name"] for obj in pair.home(kind.resource).store.list()}
            found |= {obj["metadata"]["name"] for obj in _in_twin(pair, kind).store.list()}
            for name in found:
                self.controller.queue.add((plural, pair.home_namespace, name))

    def stop_namespace(self, pair: NamespacePair) -> None:
        """Forget what was said about the pair's objects."""
        self._refusals.forget_where(lambda key: key[1] == pair.home_namespace)

    async def reconcile(self, key: ObjectKey) -> Result | None:
        """Bring the copy of one home object in line with it (or delete it)."""
        plural, namespace, name = key
        kind = self._kinds[plural]
        resource = kind.resource
        pair = self._manager.pair(namespace)
        if pair is None or not pair.synced:
            return None  # not (or no longer) offloaded here; or namespace_synced re-queues it
        home = pair.home(resource).store.get(f"{namespace}/{name}")
        current = _in_twin(pair, kind).store.get(f"{pair.twin}/{name}")
        wanted = (
            home is not None and self._policy.reflects(resource) and kind.reflectable(home, self._manager.provider_id)
        )
        refusal = kind.refusal(home) if wanted and home is not None else None
        if current is not None and not common.is_copy(current, origin=self._home_cluster_id):
            if wanted and home is not None:
                message = f"the twin {pair.twin} on the provider has a {resource.kind} {name} liqo did not make"
                await self._events.record(
                    typed(resource, home), type="Warning", reason="ReflectionConflict", message=message
                )
            return None  # never ours to change
        if not wanted or home is None or refusal is not None:
            if current is not None:
                await delete_copy(self._provider, resource, current)
            if refusal is not None and home is not None:
                await self._refusals.say(key, typed(resource, home), reason=NOT_REFLECTED, message=refusal)
            else:
                self._refusals.forget(key)
            return None
        desired = kind.copy(home, namespace=pair.twin, home_cluster_id=self._home_cluster_id)
        write = converge_copy(
            self._provider,
            resource,
            current=current,
            desired=desired,
            is_current=kind.is_current,
            must_replace=kind.must_replace,
        )
        return await self._refusals.write(
            key, typed(resource, home), write, controller=self.controller, reflector=plural
        )


def _keyer(plural: str, home_namespace: str, provider_id: str) -> Callable[[Obj], list[ObjectKey]]:
    """Every object of the kind but pod tokens (tokens.py's), unless one goes back to the cluster that issued it.

    Whether an object qualifies otherwise is the reconcile's to judge.
    """

    def keys(obj: Obj) -> list[ObjectKey]:
        labels = obj["metadata"].get("labels") or {}
        if names.POD_TOKEN in labels and not common.goes_back_to(obj, provider_id=provider_id):
            return []
        return [(plural, home_namespace, obj["metadata"]["name"])]

    return keys
