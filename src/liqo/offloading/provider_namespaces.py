"""The provider's side of namespace offloading: a twin namespace for every home namespace a consumer maps here.

Keyed by the consumer's cluster ID. A consumer declares what it wants in one NamespaceMap (named after its
ID, in its tenant namespace, written with its own identity); this controller is the only one that creates
or deletes twin namespaces, so the consumer never needs the right to create namespaces here. The
consumer's ID is taken from where the map lives, never from its spec: a consumer can only write in its
own tenant namespace, so it cannot speak for another.

Safety comes first: a namespace is touched only if it passes :func:`liqo.offloading.twins.is_twin_of` for
that consumer. Any other namespace of the wanted name (an unrelated one, another consumer's twin, a
system namespace) makes the mapping ``Conflict`` and is left alone. A twin is created with a plain create,
never an apply, so a namespace appearing between the cache read and the write is refused by the API server
rather than taken over; it is deleted with its UID as precondition, so a namesake is never deleted.

This cluster names the twins, not the consumer (:func:`naming_refusal`). The map is the consumer's word,
and a name is not harmless: a twin ``com`` holding a Service ``google`` answers ``google.com`` for every pod
here (DNS search paths, ``ndots: 5``), and a twin ``cert-manager`` is where a later install of the
provider's own lands, in a namespace the peer writes in. So a twin is named
``<namespace>-<first 8 characters of the consumer's ID>`` (:func:`liqo.api.names.twin_namespace`, the ID from
where the map lives); any other name (the consumer's ``EnforceSameName``) only if the consumer's
SharingPolicy allows it (``allowedTwinNames``, off by default). Reserved names (:data:`BUILTIN_RESERVED` and
the provider's ``--reserved-namespaces``: ``cert-manager``, ``monitoring``) are never given, whatever a
policy says. A twin of the consumer whose name these rules refuse now (the policy tightened, a name
reserved, or a twin made before the rules) is deleted: a name outside the provider's rules is not kept.

The map carries a finalizer: deleting it (the consumer unoffloading its last namespace, the tenant
namespace going away on unpeer or revoke) waits until every twin of that consumer is gone, so "the map is
gone" means "the twins are gone" for whoever watches it. While the tenant namespace is terminating nothing
is created; the twins are only deleted, which is what lets the tenant namespace finish terminating.

Each twin carries the Pod Security Admission labels of its consumer's policy level, and the annotations the
API server's admission policies read (:func:`liqo.offloading.twins.twin_annotations`): where this cluster
sees the consumer's pods (:func:`liqo.api.networks.pods_seen_at`, from the consumer's recorded network and
our NetworkConfig for it) and what its policy offers its Ingresses. The controller follows the
SharingPolicies, the ForeignClusters and our NetworkConfigs, and corrects the twins it keeps when any of
that changes; a twin is created with them, so the consumer's first writes there are judged by them.

Each twin is bounded before its consumer holds any right there (docs/security.md, "Twins' bounds"): a
ResourceQuota of object counts (:mod:`liqo.api.bounds`) and a NetworkPolicy
(:func:`liqo.offloading.twins.twin_network_policy`), both of liqo's fixed names, are written first, and the
consumer's RoleBindings only once the cluster's quota controller counts (until then the API server refuses
every write it bounds; a quota it counted before it knew our ShadowPods is made to count again,
:func:`liqo.api.bounds.recount`). Its rights are two bindings: ``liqo-peer`` (read, and delete what it
wrote) always, and ``liqo-peer-writer`` (create and change) only while it holds an accepted offer here — a
Deny or a withdrawn offer stops its reflection into this cluster, not only its pods. What it wrote stays as
it was (its ShadowPods wait, their pods gone; its Services, slices and Ingresses are not rewritten by
anyone), and comes back under its control when an offer is accepted again. The controller follows our
offers and NetworkConfigs (never the consumer's own) and its twins' quotas (their bounds and whether they
count, not their usage, which moves with each object the consumer makes) and NetworkPolicies.

The status reports every mapped home namespace (``Ready``, ``Pending``, ``Conflict`` or ``Error``), and also
every twin still being deleted, as ``Pending``: the consumer takes an absent entry as "the twin is gone".
``Conflict`` is terminal: a refused or taken name, or a write the API server refused (4xx), is not retried
on a timer, only looked at again when the map, a SharingPolicy or a namespace of that name changes.
``Error`` is for what may pass by itself (5xx, an unreachable API server): retried with a capped backoff.
The consumer writes the map, so a timer on its permanent mistakes would be a loop it can start at will.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from liqo.api import names
from liqo.api.bounds import (
    DEFAULT_TWIN_QUOTA,
    object_quota,
    quota_counted,
    quota_matches,
    quota_state,
    recount,
    uncounted,
)
from liqo.api.crds.schema import DNS_LABEL_MAX_LENGTH, DNS_LABEL_PATTERN, NAME_OR_PREFIX_PATTERN
from liqo.api.foreignclusters import ForeignClusters, peer_key
from liqo.api.networks import ClusterNetwork, IPNetwork, PodNetwork, pods_seen_at
from liqo.api.networks import remapped_pod_cidr as remapped
from liqo.api.offloadings import TwinPhase
from liqo.api.resources import (
    NAMESPACE_MAPS,
    NETWORK_CONFIGS,
    RESOURCE_OFFERS,
    SHADOW_PODS,
    SHARING_POLICIES,
)
from liqo.api.storage import ClassOffer, class_offers
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import ApiError, ConflictError, KubeError, NotFoundError
from liqo.kube.finalizers import add_finalizer, remove_finalizer
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, NETWORK_POLICIES, RESOURCE_QUOTAS, ROLE_BINDINGS, terminating
from liqo.offloading.budget import Budget, budget_of
from liqo.offloading.consumer_namespaces import retry_delay
from liqo.offloading.podsecurity import SecurityPolicy
from liqo.offloading.twins import (
    IngressOffer,
    is_twin_of,
    network_policy_matches,
    twin_annotations,
    twin_namespace_manifest,
    twin_network_policy,
    twin_patch,
    twin_role_binding,
)

log = logging.getLogger(__name__)


BUILTIN_RESERVED = ("default", "kube-*", f"{names.LIQO_NAMESPACE}*")
"""Names no twin may take, whatever the provider configures: the system's, and liqo's own (``liqo``, tenant
namespaces, and whatever liqo may add under its prefix). ``*`` at the end makes a prefix."""
_NAME = re.compile(DNS_LABEL_PATTERN)
_NAME_OR_PREFIX = re.compile(NAME_OR_PREFIX_PATTERN)
_TRANSIENT_STATUSES = frozenset({408, 429})
"""Client errors that are the server's momentary state rather than a verdict on the request."""


class TwinPolicy(Protocol):
    """What this controller needs of the sharing policy applying to a consumer."""

    @property
    def pod_security(self) -> SecurityPolicy:
        """What the consumer's pods may do here (its level goes on the twins)."""
        ...

    @property
    def allowed_twin_names(self) -> Sequence[str]:
        """The twin names the consumer may choose itself: names, or prefixes ending in ``*``."""
        ...

    @property
    def pod_network(self) -> PodNetwork:
        """Where the consumer's pods may connect, and be reached from, beyond their own (the twins' NetworkPolicy)."""
        ...

    @property
    def ingress(self) -> IngressOffer:
        """What the consumer's Ingresses may say here (told to the admission policies on its twins)."""
        ...


TwinPolicySelector = Callable[[Sequence[Mapping[str, Any]], str], TwinPolicy]
"""Which policy applies to a consumer (by cluster ID), given every SharingPolicy (the manager passes
``liqo.sharing``'s: capabilities do not import each other)."""


@dataclass(frozen=True)
class TwinStatus:
    """The state of one home namespace's twin, as the NamespaceMap status reports it."""

    remote_namespace: str
    phase: str
    """A :class:`TwinPhase` (a str: a status read back compares equal)."""
    message: str = ""

    def to_dict(self) -> dict[str, str]:
        """The status entry (``message`` only when there is one)."""
        entry = {"remoteNamespace": self.remote_namespace, "phase": self.phase}
        if self.message:
            entry["message"] = self.message
        return entry


@dataclass(frozen=True)
class Plan:
    """What to do for one consumer's map: twins to create, twins to keep, twins to delete, and the status.

    ``status`` is provisional for ``create`` (Pending) and ``keep`` (Ready): the writes decide.
    """

    create: dict[str, str] = field(default_factory=dict)
    keep: dict[str, str] = field(default_factory=dict)
    delete: list[Obj] = field(default_factory=list)
    status: dict[str, TwinStatus] = field(default_factory=dict)


def parse_reserved(text: str) -> tuple[str, ...]:
    """The provider's reserved names from ``a,b,team-*`` (a trailing ``*`` makes a prefix), empty items skipped.

    Raises:
        ValueError: an item is neither a namespace name nor a prefix of one ending in ``*``.
    """
    items = tuple(item.strip() for item in text.split(",") if item.strip())
    for item in items:
        if len(item) > DNS_LABEL_MAX_LENGTH or not _NAME_OR_PREFIX.fullmatch(item):
            raise ValueError(
                f"reserved namespace {item!r} is neither a namespace name nor a prefix of one ending in '*'"
            )
    return items


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` matches one of ``patterns`` (a name, or a prefix ending in ``*``) (pure)."""
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def valid_name(name: str) -> bool:
    """Whether ``name`` can be a namespace's (the schema checks it too, unless the CRD predates the rule)."""
    return len(name) <= DNS_LABEL_MAX_LENGTH and _NAME.fullmatch(name) is not None


def transient(error: KubeError) -> bool:
    """Whether a failed write may succeed by itself later (5xx, unreachable) rather than being refused (pure)."""
    return not isinstance(error, ApiError) or error.status >= 500 or error.status in _TRANSIENT_STATUSES


def refusal(twin: str, error: KubeError, *, doing: str) -> TwinStatus:
    """The status of a twin whose write failed: ``Error`` (retried) if transient, else ``Conflict`` (pure)."""
    if transient(error):
        return TwinStatus(twin, TwinPhase.ERROR, f"cannot {doing}: {error}")
    return TwinStatus(twin, TwinPhase.CONFLICT, f"this cluster refused to {doing}: {error}")


def origin_of(namespace: Obj) -> str:
    """The home namespace a twin stands for (``""`` if it is no twin)."""
    return str((namespace["metadata"].get("labels") or {}).get(names.ORIGIN_NAMESPACE, ""))


def twins_of(namespaces: Iterable[Obj], *, consumer_id: str) -> list[Obj]:
    """The twins this cluster made for ``consumer_id`` (pure)."""
    return [ns for ns in namespaces if is_twin_of(ns, consumer_id=consumer_id)]


def naming_refusal(
    *,
    consumer_id: str,
    home: str,
    twin: str,
    reserved_names: Sequence[str] = BUILTIN_RESERVED,
    allowed_names: Sequence[str] = (),
) -> str:
    """Why ``twin`` may not be the name of ``consumer_id``'s twin of ``home`` here, or ``""`` if it may (pure).

    In order: a name no namespace can have; a reserved one (``reserved_names``, whatever the policy allows);
    then any name but the one this cluster gives (:func:`liqo.api.names.twin_namespace`) that the consumer's
    policy does not allow (``allowed_names``, see :func:`matches`). The refusal names the name that would pass.
    """
    if not valid_name(twin):
        return f"{twin!r} is not a valid namespace name"
    if matches(twin, reserved_names):
        return f"namespace {twin} is reserved on this cluster"
    given = names.twin_namespace(home, home_cluster_id=consumer_id)
    if twin == given or matches(twin, allowed_names):
        return ""
    allowed = ", ".join(allowed_names) or "none"
    return (
        f"the twin of {home} is named {given} on this cluster; {twin}, a name of the consumer's choosing, is not"
        f" allowed by this cluster's SharingPolicy for it (allowedTwinNames: {allowed})"
    )


def plan_twins(
    *,
    consumer_id: str,
    mappings: Mapping[str, str],
    namespaces: Mapping[str, Obj],
    reserved_names: Sequence[str] = BUILTIN_RESERVED,
    allowed_names: Sequence[str] = (),
) -> Plan:
    """Decide what to do about ``consumer_id``'s ``mappings`` (home → twin name), given every namespace by name.

    - A name :func:`naming_refusal` refuses (invalid, reserved, or neither this cluster's name for that home
      nor one of ``allowed_names``) is a ``Conflict`` with the reason, and this consumer's twin of that name,
      if there is one, is deleted.
    - A wanted name taken by anything but this consumer's twin of that very home is a ``Conflict``; so is a
      name two homes want (the one whose twin exists wins, else the first in order).
    - This consumer's twins that no mapping wants (home unoffloaded, or renamed) are deleted; until they are
      gone their home is reported ``Pending``, so that the consumer waits for them.
    - A wanted twin still being deleted is ``Pending``: it is created again once gone.

    Pure; only namespaces passing :func:`is_twin_of` for ``consumer_id`` ever land in ``delete``, and only names
    :func:`naming_refusal` passes in ``create`` and ``keep``.
    """
    plan = Plan()
    refusals = {
        home: why
        for home, twin in mappings.items()
        if (
            why := naming_refusal(
                consumer_id=consumer_id,
                home=home,
                twin=twin,
                reserved_names=reserved_names,
                allowed_names=allowed_names,
            )
        )
    }
    accepted = {home: twin for home, twin in sorted(mappings.items()) if home not in refusals}
    claimants: dict[str, list[str]] = {}
    for home, twin in accepted.items():
        claimants.setdefault(twin, []).append(home)
    winners = {}
    for twin, homes in claimants.items():
        existing = namespaces.get(twin)
        owner = origin_of(existing) if existing and is_twin_of(existing, consumer_id=consumer_id) else ""
        winners[twin] = owner if owner in homes else homes[0]
    for home, twin in sorted(mappings.items()):
        existing = namespaces.get(twin)
        if home in refusals:
            plan.status[home] = TwinStatus(twin, TwinPhase.CONFLICT, refusals[home])
        elif winners[twin] != home:
            message = f"home namespaces {winners[twin]} and {home} both map to {twin}: {winners[twin]} has it"
            plan.status[home] = TwinStatus(twin, TwinPhase.CONFLICT, message)
        elif existing is None:
            plan.create[home] = twin
            plan.status[home] = TwinStatus(twin, TwinPhase.PENDING, "creating the twin namespace")
        elif not is_twin_of(existing, consumer_id=consumer_id):
            message = (
                f"namespace {twin} already exists on this cluster and is not a twin of this consumer's namespace"
                f" {home}: it is left untouched"
            )
            plan.status[home] = TwinStatus(twin, TwinPhase.CONFLICT, message)
        elif origin_of(existing) != home:
            # Another home's twin that no mapping wants any more (below, it is deleted): the name frees up.
            message = f"namespace {twin}, the former twin of {origin_of(existing)}, is being deleted"
            plan.status[home] = TwinStatus(twin, TwinPhase.PENDING, message)
        elif terminating(existing):
            message = f"the previous twin {twin} is being deleted; it is created again once gone"
            plan.status[home] = TwinStatus(twin, TwinPhase.PENDING, message)
        else:
            plan.keep[home] = twin
            plan.status[home] = TwinStatus(twin, TwinPhase.READY)
    for namespace in twins_of(namespaces.values(), consumer_id=consumer_id):
        name, home = namespace["metadata"]["name"], origin_of(namespace)
        if accepted.get(home) == name:
            continue
        if not terminating(namespace):
            plan.delete.append(namespace)
        if home not in plan.status:
            plan.status[home] = TwinStatus(name, TwinPhase.PENDING, f"twin {name} is being deleted")
    return plan


def map_status(status: Mapping[str, TwinStatus]) -> dict[str, Any]:
    """The NamespaceMap ``status`` for per-home twin states (pure).

    No twin: no ``mappings`` at all (applying that drops ours), rather than an empty map, which server-side
    apply can turn into a ``null`` the schema refuses.
    """
    if not status:
        return {}
    return {"mappings": {home: twin.to_dict() for home, twin in sorted(status.items())}}


def consumer_of_map(namespace_map: Obj) -> list[str]:
    """The consumer a NamespaceMap speaks for: its name, if it lives in that consumer's tenant namespace."""
    meta = namespace_map["metadata"]
    return [meta["name"]] if meta.get("namespace") == names.tenant_namespace(meta["name"]) else []


WAITING_FOR_QUOTA = "waiting for this cluster's quota controller to count the objects in {twin}"
RECOUNTING = (
    "waiting for this cluster's quota controller to count the objects in {twin}: it counted the quota before it knew"
    " liqo's ShadowPods, and is made to count it again"
)
RECOUNT_SECONDS = 5.0
"""How often a twin's quota counted without our custom resources is made to count again."""
WRITES_WITHDRAWN = (
    "the consumer holds no accepted offer here: its writes in its twins are withdrawn (what it wrote stays, it may"
    " delete it) until it accepts one"
)


def _binding_matches(current: Obj | None, desired: Obj) -> bool:
    if current is None:
        return False
    labels = current["metadata"].get("labels") or {}
    return all(current.get(f) == desired[f] for f in ("roleRef", "subjects")) and all(
        labels.get(k) == v for k, v in desired["metadata"]["labels"].items()
    )


class NamespaceMapController(Component):
    """Creates, reports and deletes the twin namespaces of every consumer's NamespaceMap."""

    def __init__(
        self,
        *,
        client: KubeClient,
        informers: SharedInformers,
        select: TwinPolicySelector,
        local_id: str,
        network: ClusterNetwork,
        reserved: Sequence[str] = (),
        twin_quota: Mapping[str, int] = DEFAULT_TWIN_QUOTA,
    ) -> None:
        """Follow every consumer's NamespaceMap.

        ``local_id`` and ``network`` are this cluster's: its offers and NetworkConfigs are named after it (our
        NetworkConfig for a consumer says where we see its pods), and its pod and service CIDRs are never opened by
        a twin's NetworkPolicy; ``twin_quota``: each twin's object counts.
        """
        self._client = client
        self._select = select
        self._local_id = local_id
        self._network = network
        self._twin_quota = dict(twin_quota)
        self._reserved = (*BUILTIN_RESERVED, *reserved)
        self._failures: dict[str, int] = {}  # consumer → transient failures in a row (the retry's backoff)
        self._recounts: dict[str, float] = {}  # twin → when its quota was last made to count again
        self.maps = informers.informer(NAMESPACE_MAPS)
        self.policies = informers.informer(SHARING_POLICIES)
        self.namespaces = informers.informer(NAMESPACES)
        self.bindings = informers.informer(ROLE_BINDINGS, label_selector=names.REMOTE_CLUSTER_ID)
        self.offers = informers.informer(RESOURCE_OFFERS)
        self._by_cluster_id = ForeignClusters.shared(informers)
        self.foreign_clusters = self._by_cluster_id.informer
        self.network_configs = informers.informer(NETWORK_CONFIGS)
        self.quotas = informers.informer(RESOURCE_QUOTAS, field_selector=f"metadata.name={names.PEER_QUOTA}")
        self.network_policies = informers.informer(
            NETWORK_POLICIES, field_selector=f"metadata.name={names.PEER_NETWORK_POLICY}"
        )
        self.controller: Controller[str] = Controller(name="namespace-maps", reconcile=self.reconcile, workers=2)
        self.controller.watch(self.maps, consumer_of_map)
        self.controller.watch(self.namespaces, self._consumers_of_namespace)
        self.controller.watch(self.bindings, names.labelled_peer)
        self.controller.watch(self.policies, self._every_consumer)
        self.controller.watch(self.offers, self._consumer_of_ours)
        self.controller.watch(self.foreign_clusters, peer_key)
        self.controller.watch(self.network_configs, self._consumer_of_ours)
        # A quota's usage moves with every object the consumer makes: only its bounds and whether it counts matter.
        self.controller.watch(
            self.quotas, self._consumer_of_twin, changed=lambda old, new: quota_state(old) != quota_state(new)
        )
        self.controller.watch(self.network_policies, self._consumer_of_twin)

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    def _every_consumer(self, _policy: Obj) -> list[str]:
        """Every consumer with a map: a SharingPolicy change may move any one's level, twin names or Ingress offer."""
        return [key for nm in self.maps.store.list() for key in consumer_of_map(nm)]

    def _consumer_of_ours(self, obj: Obj) -> list[str]:
        """The consumer whose tenant namespace holds ``obj``, if it is ours (named after this cluster).

        Our offer to it (its phase decides whether it writes in its twins), our NetworkConfig for it (where we
        see its pods); not its own NetworkConfig, which it rewrites at will.
        """
        return names.tenant_peer(obj) if obj["metadata"]["name"] == self._local_id else []

    def _consumer_of_twin(self, obj: Obj) -> list[str]:
        """The consumer whose twin holds ``obj``: the namespace's label, which this cluster wrote, not the object's."""
        namespace = self.namespaces.store.get(obj["metadata"].get("namespace") or "")
        return (
            names.labelled_peer(namespace)
            if namespace is not None and names.ORIGIN_NAMESPACE in (namespace["metadata"].get("labels") or {})
            else []
        )

    def holds_offer(self, consumer_id: str) -> bool:
        """Whether ``consumer_id`` holds an accepted offer of ours: its budget, and its right to write in its twins."""
        offer = self.offers.store.get(f"{names.tenant_namespace(consumer_id)}/{self._local_id}")
        return isinstance(budget_of(offer, count_limits=False), Budget)

    def offered_storage(self, consumer_id: str) -> tuple[ClassOffer, ...]:
        """The storage ``consumer_id``'s accepted offer holds: the only classes its claims in its twins may name.

        The accepted offer's, not the policy's: the offer leaves out the policy's classes that cannot be budgeted
        (:mod:`liqo.sharing.offers`), and a consumer without an accepted offer claims nothing.
        """
        offer = self.offers.store.get(f"{names.tenant_namespace(consumer_id)}/{self._local_id}")
        if not isinstance(budget_of(offer, count_limits=False), Budget) or offer is None:
            return ()
        return class_offers((offer.get("spec") or {}).get("storage"))

    def peer_pods(self, consumer_id: str) -> IPNetwork | None:
        """Where this cluster sees ``consumer_id``'s pods: what its virtual kubelet translates their addresses to.

        From the consumer's network its ForeignCluster records (its word at its last handshake, checked) and
        our NetworkConfig for it (our word: the block the network fabric remapped its pods to), both written
        by this cluster only. None while unknown, or when the pod CIDRs clash and nothing remaps them. One
        source for the twins' admission annotation and their NetworkPolicy's home-pod block: the two never disagree.
        """
        found = self._by_cluster_id.record_of(consumer_id)
        owner = None if found is None or terminating(found) else self._by_cluster_id.network_of(consumer_id)
        ours = self.network_configs.store.get(f"{names.tenant_namespace(consumer_id)}/{self._local_id}")
        return pods_seen_at(owner=owner, reader=self._network, remapped_pod_cidr=remapped(ours))

    def _consumers_of_namespace(self, namespace: Obj) -> list[str]:
        """The consumer a namespace is labelled for, and every consumer wanting a twin of its name.

        The latter matters when an unrelated namespace in the way is deleted: the conflict then resolves.
        """
        name = namespace["metadata"]["name"]
        wanting = [
            key
            for nm in self.maps.store.list()
            if name in ((nm.get("spec") or {}).get("mappings") or {}).values()
            for key in consumer_of_map(nm)
        ]
        return names.labelled_peer(namespace) + wanting

    async def reconcile(self, consumer_id: str) -> Result | None:
        """Converge the twins of ``consumer_id`` on its NamespaceMap."""
        tenant_name = names.tenant_namespace(consumer_id)
        tenant = self.namespaces.store.get(tenant_name)
        namespace_map = self.maps.store.get(f"{tenant_name}/{consumer_id}")
        if tenant is None or terminating(tenant) or namespace_map is None or terminating(namespace_map):
            self._failures.pop(consumer_id, None)
            await self._teardown(consumer_id, namespace_map)
            return None
        await add_finalizer(self._client, NAMESPACE_MAPS, namespace_map, finalizer=names.FINALIZER)
        by_name = {ns["metadata"]["name"]: ns for ns in self.namespaces.store.list()}
        mappings = (namespace_map.get("spec") or {}).get("mappings") or {}
        policy = self._select(self.policies.store.list(), consumer_id)
        plan = plan_twins(
            consumer_id=consumer_id,
            mappings=mappings,
            namespaces=by_name,
            reserved_names=self._reserved,
            allowed_names=policy.allowed_twin_names,
        )
        status = dict(plan.status)
        level = policy.pod_security.level
        writer = self.holds_offer(consumer_id)
        peer_pods = self.peer_pods(consumer_id)
        storage = self.offered_storage(consumer_id)
        annotations = twin_annotations(peer_pods=peer_pods, ingress=policy.ingress, storage=storage)
        for home, twin in plan.create.items():
            status[home] = await self._create(
                consumer_id=consumer_id,
                home=home,
                twin=twin,
                level=level,
                annotations=annotations,
                policy=policy,
                writer=writer,
                peer_pods=peer_pods,
            )
        for home, twin in plan.keep.items():
            status[home] = await self._ensure_twin_metadata(by_name[twin], level=level, annotations=annotations)
            if status[home].phase == TwinPhase.READY:
                status[home] = await self._ensure_rbac(
                    consumer_id=consumer_id, twin=twin, policy=policy, writer=writer, peer_pods=peer_pods
                )
        for namespace in plan.delete:
            meta = namespace["metadata"]
            log.info("deleting twin namespace %s of %s/%s", meta["name"], consumer_id, origin_of(namespace))
            await self._delete_twin(namespace)
        desired = map_status(status)
        if (namespace_map.get("status") or {}) != desired:
            await self._client.apply_status(NAMESPACE_MAPS, name=consumer_id, namespace=tenant_name, status=desired)
        if not any(twin.phase == TwinPhase.ERROR for twin in status.values()):
            self._failures.pop(consumer_id, None)
            recounting = any(twin.message == RECOUNTING.format(twin=twin.remote_namespace) for twin in status.values())
            return Result(requeue_after=RECOUNT_SECONDS) if recounting else None
        failures = self._failures.get(consumer_id, 0)
        self._failures[consumer_id] = failures + 1
        return Result(requeue_after=retry_delay(failures))

    async def _create(
        self,
        *,
        consumer_id: str,
        home: str,
        twin: str,
        level: str,
        annotations: Mapping[str, str],
        policy: TwinPolicy,
        writer: bool,
        peer_pods: IPNetwork | None,
    ) -> TwinStatus:
        """Create the twin (never over an existing namespace), then its bounds, then the consumer's rights in it."""
        manifest = twin_namespace_manifest(
            name=twin, consumer_id=consumer_id, home_namespace=home, level=level, annotations=annotations
        )
        try:
            await self._client.create(NAMESPACES, manifest)
            log.info("created twin namespace %s of %s/%s", twin, consumer_id, home)
        except ConflictError:
            # It exists, though our cache did not show it: ours if we made it an instant ago, else someone's.
            try:
                existing = await self._client.get(NAMESPACES, twin)
            except NotFoundError:
                return TwinStatus(twin, TwinPhase.PENDING, f"namespace {twin} is being deleted")
            if not is_twin_of(existing, consumer_id=consumer_id) or origin_of(existing) != home:
                return TwinStatus(twin, TwinPhase.PENDING, f"namespace {twin} appeared meanwhile; looking again")
            if terminating(existing):
                return TwinStatus(twin, TwinPhase.PENDING, f"the previous twin {twin} is being deleted")
        except KubeError as exc:
            return refusal(twin, exc, doing=f"create namespace {twin}")
        return await self._ensure_rbac(
            consumer_id=consumer_id, twin=twin, policy=policy, writer=writer, peer_pods=peer_pods
        )

    async def _ensure_twin_metadata(self, namespace: Obj, *, level: str, annotations: Mapping[str, str]) -> TwinStatus:
        """Bring a kept twin's PSA labels and admission annotations to what the consumer's policy and network say."""
        name = namespace["metadata"]["name"]
        patch = twin_patch(namespace, level=level, annotations=annotations)
        if patch is not None:
            try:
                await self._client.patch(NAMESPACES, name, patch)
            except KubeError as exc:
                return TwinStatus(name, TwinPhase.ERROR, f"cannot set what the admission of {name} reads: {exc}")
            log.info("twin namespace %s: pod security level %s, %s", name, level, annotations)
        return TwinStatus(name, TwinPhase.READY)

    async def _ensure_rbac(
        self, *, consumer_id: str, twin: str, policy: TwinPolicy, writer: bool, peer_pods: IPNetwork | None
    ) -> TwinStatus:
        """Bound ``twin``, then give the consumer its rights there: always its reader's, its writer's with an offer.

        Each binding is applied unless the cache shows it as it should be; the writer's is deleted while the
        consumer holds no accepted offer.
        """
        bounded = await self._ensure_bounds(consumer_id=consumer_id, twin=twin, policy=policy, peer_pods=peer_pods)
        if bounded is not None:
            return bounded
        try:
            await self._ensure_binding(twin_role_binding(namespace=twin, consumer_id=consumer_id))
            if writer:
                await self._ensure_binding(twin_role_binding(namespace=twin, consumer_id=consumer_id, writer=True))
            elif self.bindings.store.get(f"{twin}/{names.PEER_WRITER_BINDING}") is not None:
                await self._client.delete(ROLE_BINDINGS, names.PEER_WRITER_BINDING, namespace=twin, missing_ok=True)
                log.info("twin namespace %s: %s holds no accepted offer, its writes withdrawn", twin, consumer_id)
        except KubeError as exc:
            return refusal(twin, exc, doing=f"grant the consumer its rights in {twin}")
        return TwinStatus(twin, TwinPhase.READY, "" if writer else WRITES_WITHDRAWN)

    async def _ensure_binding(self, binding: Obj) -> None:
        meta = binding["metadata"]
        if not _binding_matches(self.bindings.store.get(f"{meta['namespace']}/{meta['name']}"), binding):
            await self._client.apply(ROLE_BINDINGS, binding)

    async def _ensure_bounds(
        self, *, consumer_id: str, twin: str, policy: TwinPolicy, peer_pods: IPNetwork | None
    ) -> TwinStatus | None:
        """Apply ``twin``'s quota and NetworkPolicy unless cached as they should be; None once rights may follow.

        Otherwise the status saying why not. The first rights wait for the quota to count: until the quota
        controller has counted what it bounds, the API server refuses every write of those kinds there ("status
        unknown for quota"), and a consumer told its twin is ready would see its first writes refused.
        """
        quota = object_quota(namespace=twin, peer_id=consumer_id, hard=self._twin_quota)
        network_policy = twin_network_policy(
            namespace=twin,
            consumer_id=consumer_id,
            home_pods=peer_pods,
            local=self._network,
            allowed=policy.pod_network,
        )
        current = self.quotas.store.get(f"{twin}/{names.PEER_QUOTA}")
        granted = self.bindings.store.get(f"{twin}/{names.PEER_BINDING}") is not None
        try:
            if not quota_matches(current, quota):
                current = await self._client.apply(RESOURCE_QUOTAS, quota)
            elif not granted and (keys := uncounted(current or {})) and self._recount_due(twin):
                # Counted before the cluster knew our custom resources: changed, it is counted afresh.
                await self._client.apply(RESOURCE_QUOTAS, recount(quota, keys=keys))
                log.info("twin namespace %s: the quota controller did not count %s; counting again", twin, keys)
            if not network_policy_matches(
                self.network_policies.store.get(f"{twin}/{names.PEER_NETWORK_POLICY}"), network_policy
            ):
                await self._client.apply(NETWORK_POLICIES, network_policy)
        except KubeError as exc:
            return refusal(twin, exc, doing=f"bound what the consumer may do in {twin}")
        if not granted and not quota_counted(current or {}):
            # Counted without some bounds, it is looked at again on a timer: no event says when to count again.
            waiting = RECOUNTING if uncounted(current or {}) else WAITING_FOR_QUOTA
            return TwinStatus(twin, TwinPhase.PENDING, waiting.format(twin=twin))
        self._recounts.pop(twin, None)
        return None

    def _recount_due(self, twin: str) -> bool:
        """Whether ``twin``'s quota may be made to count again now: at most every :data:`RECOUNT_SECONDS`.

        Until the quota controller knows our custom resources (up to 30 s after they are installed) a recount
        counts no better; each costs it a full count of the namespace.
        """
        now = time.monotonic()
        if now - self._recounts.get(twin, -RECOUNT_SECONDS) < RECOUNT_SECONDS:
            return False
        self._recounts[twin] = now
        return True

    async def _delete_twin(self, twin: Obj) -> None:
        """Delete ``twin`` (its UID a precondition, so a namesake is never deleted), its ShadowPods first.

        The namespace controller deletes a namespace's pods before the rest, so it would find the ShadowPods
        still asking for pods it just deleted and come back for them one pass later, and for their finalizers
        one more: three passes of five seconds or more. Deleting the ShadowPods at once lets each let its pod
        go with the consumer's grace period, and the namespace is empty by the controller's first pass.
        """
        meta = twin["metadata"]
        try:
            await self._client.delete(NAMESPACES, meta["name"], uid=meta.get("uid"))
        except (NotFoundError, ConflictError):
            return  # gone, or a namesake: nothing of it is ours to delete
        shadows, _ = await self._client.list_all(SHADOW_PODS, namespace=meta["name"])
        for shadow in shadows:
            with contextlib.suppress(NotFoundError, ConflictError):
                await self._client.delete(
                    SHADOW_PODS, shadow["metadata"]["name"], namespace=meta["name"], uid=shadow["metadata"]["uid"]
                )

    async def _teardown(self, consumer_id: str, namespace_map: Obj | None) -> None:
        """Delete every twin of ``consumer_id``; once none is left, let its NamespaceMap go."""
        twins = twins_of(self.namespaces.store.list(), consumer_id=consumer_id)
        for twin in twins:
            if terminating(twin):
                continue
            meta = twin["metadata"]
            log.info("deleting twin namespace %s of %s (no NamespaceMap wants it)", meta["name"], consumer_id)
            await self._delete_twin(twin)
        if twins or namespace_map is None:
            return  # the namespaces' deletion events bring us back
        await remove_finalizer(self._client, NAMESPACE_MAPS, namespace_map, finalizer=names.FINALIZER)
