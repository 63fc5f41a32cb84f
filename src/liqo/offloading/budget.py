"""One budget per consumer: how much of this provider a consumer's pods may hold, and the ledger keeping it (pure).

The budget is the accepted offer. A consumer's pods, in all its twin namespaces together, hold at most the
``spec.resources`` of the provider's ResourceOffer to it, and only while the offer's phase is ``Accepted``;
no offer (none yet, withdrawn, denied) or one not accepted is no budget: none of its pods runs. The phase
is the one field of the offer the consumer writes, so all it can do with it is accept what the provider
offered or refuse it and stop its own pods; no write of the consumer makes the budget larger.

Why not a ResourceQuota, as before: a quota lives in one namespace, so each twin held the whole offer (N
twins, N offers); it refused pods without requests (so ``kubectl create deployment nginx`` never ran);
and its status is an API write for every pod created, on the hot path of every offloaded pod. The budget
is kept in memory instead, by the provider's ShadowPod controller (:mod:`liqo.offloading.shadowpods`): it
runs in the leader only, so it is the single writer of the pods it accounts for, and a check needs neither
a lock (decisions are synchronous, on one event loop) nor an API round trip. After a restart the ledger is
rebuilt from the pods that exist.

What a pod takes (:func:`pod_usage`): its effective requests by the scheduler's rule
(:func:`liqo.api.podrequests.pod_requests`), one of ``pods``, and its declared limits by the same rule.
Requests must add up within the budget in every resource the pod asks for; limits too when the consumer's
sharing policy counts them (``countLimits``, the default). A resource the offer does not hold is a budget
of nothing: a pod asking for ``nvidia.com/gpu`` from an offer without GPUs never fits. A pod with no
requests (BestEffort) takes one of ``pods`` and nothing else — which is how the consumer's own scheduler
counts it against the virtual node, whose capacity is the offer, so home and provider agree on what fits;
on the provider such a pod has the lowest quality of service (evicted first, CPU only when it is idle).

Storage is budgeted per StorageClass (the accepted offer's ``spec.storage``), and held by *claims*, not pods: a
volume outlives the pods using it. Every class a provider offers waits for a first consumer (the policy's
classes that do not are left out of the offer), so a claim's volume is made only once a pod using it is
scheduled, and only this controller makes the consumer's pods; a peer's claim carries no annotation that
would have a volume made sooner (the admission policy, ``liqo.install.peerwrites``). So a claim is counted
(:class:`ClaimLedger`) from the admission of the first pod using it — that pod is made only if every claim it
brings fits, with the claims already held, in the class's budget — until the claim is deleted. A claim's size
is the larger of what it requests and what its volume holds. A generic ephemeral volume is a claim too
(kube-controller-manager makes it, ``<pod>-<volume>``, from the pod's template).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from liqo.api.offers import OfferPhase
from liqo.api.podrequests import Resources, pod_limits, pod_requests
from liqo.api.quantity import QuantityError, format_quantity, parse_quantity
from liqo.api.storage import class_offers
from liqo.kube.resources import terminating

PODS = "pods"
_CONTAINER_LISTS = ("containers", "initContainers")


class UnreadablePod(ValueError):
    """A pod spec whose resources cannot be measured; the message names the field."""


@dataclass(frozen=True)
class Usage:
    """What one pod, or a consumer's pods together, take from a budget."""

    requests: Mapping[str, Decimal] = field(default_factory=dict)
    """Effective requests per resource, ``pods`` included."""
    limits: Mapping[str, Decimal] = field(default_factory=dict)
    """Declared limits per resource."""


@dataclass(frozen=True)
class Budget:
    """What a consumer's pods may hold here: its accepted offer, counted as its sharing policy says."""

    resources: Mapping[str, Decimal]
    """The accepted offer's ``spec.resources``."""
    count_limits: bool = True
    """Whether the pods' declared limits must add up within ``resources`` too (requests always must)."""
    storage: Mapping[str, Decimal] = field(default_factory=dict)
    """What the consumer's claims may request together, per StorageClass (the offer's ``spec.storage``)."""


@dataclass(frozen=True)
class NoBudget:
    """Why a consumer has no budget here: none of its pods may run."""

    message: str


@dataclass(frozen=True)
class Shortfall:
    """Why a pod does not fit the budget: the first resource (by kind, then name) it would overrun."""

    resource: str
    kind: str
    """``requests`` or ``limits``."""
    needed: Decimal
    """What the pod alone takes of ``resource``."""
    allowed: Decimal | None
    """What the budget allows in all, or ``None`` if the offer does not hold ``resource`` at all."""

    @property
    def message(self) -> str:
        """The reason, with the figures that do not move while the pod waits (the pod's and the budget's).

        What the other pods hold is left out: it moves whenever one of them comes or goes, and a message
        that moves would rewrite the status of every waiting pod each time.
        """
        what = "requests" if self.kind == "requests" else "declares limits of"
        need = _quantity(self.needed, self.resource)
        if self.allowed is None:
            return (
                f"{self.resource}: the pod {what} {need} and the consumer's accepted offer holds no {self.resource};"
                " it cannot run here under this offer"
            )
        total = _quantity(self.allowed, self.resource)
        if self.resource == PODS:
            return (
                f"pods: the consumer already runs all {total} pods its accepted offer allows here;"
                " the pod starts as soon as one of them leaves room"
            )
        return (
            f"{self.resource} {self.kind}: the pod {what} {need}, and with the consumer's other pods here that"
            f" would exceed the {total} its accepted offer allows; it starts as soon as they leave room"
        )


def pod_usage(pod_spec: Mapping[str, Any]) -> Usage:
    """What a pod with spec ``pod_spec`` takes from its consumer's budget (pure).

    Raises:
        UnreadablePod: A resource amount or the structure holding it is malformed (a peer wrote it: any JSON
            may come), naming the field.
    """
    _check_resources(pod_spec)
    pod = {"spec": pod_spec}
    requests = {r: amount for r, amount in pod_requests(pod).items() if amount > 0}
    limits = {r: amount for r, amount in pod_limits(pod).items() if amount > 0}
    return Usage(requests=requests | {PODS: Decimal(1)}, limits=limits)


def budget_of(offer: Mapping[str, Any] | None, *, count_limits: bool) -> Budget | NoBudget:
    """The budget a consumer has, given the provider's ResourceOffer to it (pure).

    Args:
        offer: The ResourceOffer named after this cluster in the consumer's tenant namespace, if any.
        count_limits: The consumer's sharing policy's ``countLimits``.
    """
    if offer is None or terminating(offer):
        return NoBudget(
            "this provider has no offer for the consumer (not yet made, withdrawn, or denied by its sharing"
            " policy): no pod of the consumer runs here until one is accepted"
        )
    phase = (offer.get("status") or {}).get("phase")
    if phase != OfferPhase.ACCEPTED:
        return NoBudget(
            f"the consumer has not accepted this provider's offer (its phase is {phase or 'not set'}):"
            " no pod of the consumer runs here until it does"
        )
    spec = offer.get("spec") or {}
    resources: dict[str, Decimal] = {}
    for name, amount in (spec.get("resources") or {}).items():
        try:
            resources[name] = parse_quantity(amount)
        except QuantityError as exc:
            return NoBudget(f"the offer's spec.resources.{name} cannot be read ({exc}): no pod of the consumer runs")
    try:
        storage = {offer.name: offer.capacity for offer in class_offers(spec.get("storage"))}
    except (QuantityError, ValueError, AttributeError) as exc:
        return NoBudget(f"the offer's spec.storage cannot be read ({exc}): no pod of the consumer runs")
    return Budget(resources=resources, count_limits=count_limits, storage=storage)


def shortfall(budget: Budget, in_use: Usage, pod: Usage) -> Shortfall | None:
    """Whether ``pod`` fits ``budget`` beside what the consumer's pods hold (``in_use``): ``None`` if it does (pure).

    Requests are checked first, then (if counted) limits, each resource in name order, so the answer for a
    waiting pod does not change while nothing but the other pods do.
    """
    kinds = [("requests", pod.requests, in_use.requests)]
    if budget.count_limits:
        kinds.append(("limits", pod.limits, in_use.limits))
    for kind, needed, used in kinds:
        for resource in sorted(needed):
            amount = needed[resource]
            allowed = budget.resources.get(resource)
            if allowed is None or used.get(resource, Decimal(0)) + amount > allowed:
                return Shortfall(resource=resource, kind=kind, needed=amount, allowed=allowed)
    return None


@dataclass(frozen=True)
class Holding:
    """A ShadowPod whose pod exists, or is being created, and what it takes."""

    consumer: str
    uid: str
    """The ShadowPod's UID: a namesake made later is another pod, with its own admission."""
    usage: Usage


class Ledger:
    """Per consumer, the ShadowPods holding part of its budget and those waiting for room.

    Keys are ShadowPod keys (``namespace/name``). Every method is synchronous: on one event loop, a check and
    the holding it grants are one step, so two pods can never both take the last room.
    """

    def __init__(self) -> None:
        self._holdings: dict[str, Holding] = {}
        self._requests: dict[str, Resources] = defaultdict(lambda: defaultdict(Decimal))
        self._limits: dict[str, Resources] = defaultdict(lambda: defaultdict(Decimal))
        self._waiting: dict[str, set[str]] = defaultdict(set)

    def holding(self, key: str) -> Holding | None:
        """What ``key`` holds, if anything."""
        return self._holdings.get(key)

    def in_use(self, consumer: str) -> Usage:
        """What ``consumer``'s holding pods take together."""
        return Usage(requests=dict(self._requests.get(consumer, {})), limits=dict(self._limits.get(consumer, {})))

    def held_by(self, consumer: str) -> list[str]:
        """The keys holding part of ``consumer``'s budget."""
        return [key for key, holding in self._holdings.items() if holding.consumer == consumer]

    def waiting(self, consumer: str) -> list[str]:
        """The keys of ``consumer`` waiting for room (or for a budget)."""
        return sorted(self._waiting.get(consumer, ()))

    def consumers(self) -> set[str]:
        """Every consumer holding or waiting."""
        return {h.consumer for h in self._holdings.values()} | {c for c, keys in self._waiting.items() if keys}

    def admit(self, key: str, *, consumer: str, uid: str, usage: Usage, budget: Budget) -> Shortfall | None:
        """Hold ``usage`` for ``key`` if it fits ``budget``; otherwise record it as waiting and say why.

        Asked for every pod about to be made, the first or a later one of the same ShadowPod: what ``key``
        held is released first (its pod is gone), and ``usage`` is checked on its own. A pod made again is
        never let through on its first version's room: its ShadowPod's spec may have grown since.
        """
        self.release(key)
        missing = shortfall(budget, self.in_use(consumer), usage)
        if missing is not None:
            self._waiting[consumer].add(key)
            return missing
        self.hold(key, consumer=consumer, uid=uid, usage=usage)
        return None

    def hold(self, key: str, *, consumer: str, uid: str, usage: Usage) -> None:
        """Count ``usage`` for ``key`` whatever the budget: a pod that exists (the ledger being rebuilt)."""
        if key in self._holdings:
            self.release(key)
        self._holdings[key] = Holding(consumer=consumer, uid=uid, usage=usage)
        _add(self._requests[consumer], usage.requests, 1)
        _add(self._limits[consumer], usage.limits, 1)
        self.stop_waiting(key)

    def wait(self, key: str, *, consumer: str) -> None:
        """Record ``key`` as waiting for ``consumer``'s budget (to be woken when it may fit)."""
        self._waiting[consumer].add(key)

    def stop_waiting(self, key: str) -> None:
        """``key`` waits no more (it runs, or its ShadowPod is gone)."""
        for consumer, keys in list(self._waiting.items()):
            keys.discard(key)
            if not keys:
                del self._waiting[consumer]

    def release(self, key: str) -> str | None:
        """Free what ``key`` holds; the consumer whose budget has room again, if it held anything."""
        holding = self._holdings.pop(key, None)
        if holding is None:
            return None
        _add(self._requests[holding.consumer], holding.usage.requests, -1)
        _add(self._limits[holding.consumer], holding.usage.limits, -1)
        return holding.consumer


@dataclass(frozen=True)
class Claim:
    """A claim of a consumer's pod, as the budget counts it: its class and size (``storage_class`` may be empty)."""

    key: str
    """``namespace/name`` of the PersistentVolumeClaim (made by kube-controller-manager for an ephemeral volume)."""
    storage_class: str
    size: Decimal


@dataclass(frozen=True)
class ClaimsWait:
    """Why a pod's claims cannot be counted yet, or would overrun the storage budget: the pod waits."""

    message: str
    missing: bool = False
    """A claim is not there yet (rather than too large)."""


def claim_size(claim: Mapping[str, Any]) -> Decimal:
    """What a PersistentVolumeClaim takes: the larger of its request and its volume's capacity (pure).

    Raises:
        QuantityError: A size that is not a quantity (the API server validates both: cannot happen).
    """
    requested = (((claim.get("spec") or {}).get("resources") or {}).get("requests") or {}).get("storage", 0)
    capacity = ((claim.get("status") or {}).get("capacity") or {}).get("storage", 0)
    return max(parse_quantity(requested), parse_quantity(capacity))


def pod_claims(
    pod_spec: Mapping[str, Any],
    *,
    namespace: str,
    pod_name: str,
    claim_of: Callable[[str], Mapping[str, Any] | None],
) -> list[Claim] | ClaimsWait:
    """The claims a pod with ``pod_spec`` uses, in its volumes' order, or why they cannot be counted yet (pure).

    Args:
        pod_spec: The pod's spec (judged already: storage volumes only where the policy offers storage).
        namespace: The pod's namespace (its twin).
        pod_name: The pod's name (an ephemeral volume's claim is ``<pod>-<volume>``).
        claim_of: The PersistentVolumeClaim of a ``namespace/name`` key, if it exists (the cache).
    """
    claims = []
    for volume in pod_spec.get("volumes") or ():
        if not isinstance(volume, Mapping):
            continue
        source, ephemeral = volume.get("persistentVolumeClaim"), volume.get("ephemeral")
        try:
            if isinstance(source, Mapping):
                key = f"{namespace}/{source.get('claimName')}"
                claim = claim_of(key)
                if claim is None:
                    name = source.get("claimName")
                    return ClaimsWait(f"claim {name} does not exist in {namespace} (yet)", missing=True)
                spec = claim.get("spec") or {}
                claims.append(Claim(key, str(spec.get("storageClassName") or ""), claim_size(claim)))
            elif isinstance(ephemeral, Mapping):
                template = ephemeral.get("volumeClaimTemplate") or {}
                key = f"{namespace}/{pod_name}-{volume.get('name')}"
                made = claim_of(key)
                spec = (made or template).get("spec") or {}
                claims.append(Claim(key, str(spec.get("storageClassName") or ""), claim_size(made or template)))
        except (QuantityError, AttributeError, TypeError) as exc:
            return ClaimsWait(f"volume {volume.get('name')}: its claim's size cannot be read ({exc})")
    return claims


class ClaimLedger:
    """Per consumer and StorageClass, what its counted claims hold (:mod:`this module's note <liqo.offloading.budget>`).

    Synchronous, like :class:`Ledger`: a check and the counting it grants are one step on the event loop.
    """

    def __init__(self) -> None:
        self._claims: dict[str, tuple[str, Claim]] = {}
        self._held: dict[str, dict[str, Decimal]] = defaultdict(lambda: defaultdict(Decimal))

    def held(self, consumer: str) -> dict[str, Decimal]:
        """What ``consumer``'s counted claims hold, per class."""
        return dict(self._held.get(consumer, {}))

    def counted(self, key: str) -> bool:
        """Whether claim ``key`` is counted."""
        return key in self._claims

    def shortfall(self, consumer: str, claims: Iterable[Claim], storage: Mapping[str, Decimal]) -> ClaimsWait | None:
        """Whether ``claims`` not counted yet overrun ``consumer``'s ``storage`` budget beside the counted ones."""
        adding: dict[str, Decimal] = defaultdict(Decimal)
        for claim in claims:
            if claim.key not in self._claims:
                adding[claim.storage_class] += claim.size
        held = self._held.get(consumer, {})
        for storage_class in sorted(adding):
            allowed = storage.get(storage_class)
            need = format_quantity(adding[storage_class], resource="storage")
            if allowed is None:
                what = f"class {storage_class}" if storage_class else "no class"
                return ClaimsWait(
                    f"storage: the pod's new claims ask {need} of {what}, which the consumer's accepted offer does"
                    " not hold; it cannot run here under this offer"
                )
            if held.get(storage_class, Decimal(0)) + adding[storage_class] > allowed:
                total = format_quantity(allowed, resource="storage")
                return ClaimsWait(
                    f"storage of class {storage_class}: the pod's new claims ask {need}, and with the consumer's other"
                    f" claims here that would exceed the {total} its accepted offer allows; it starts as soon as"
                    " claims are deleted or the offer grows"
                )
        return None

    def count(self, consumer: str, claims: Iterable[Claim]) -> None:
        """Count ``claims`` (those counted already stay as they are)."""
        for claim in claims:
            if claim.key not in self._claims:
                self._claims[claim.key] = (consumer, claim)
                self._held[consumer][claim.storage_class] += claim.size

    def release(self, key: str) -> str | None:
        """Stop counting claim ``key`` (deleted); the consumer whose budget has room again, if it was counted."""
        found = self._claims.pop(key, None)
        if found is None:
            return None
        consumer, claim = found
        _add(self._held[consumer], {claim.storage_class: claim.size}, -1)
        return consumer


def _add(total: Resources, amounts: Mapping[str, Decimal], sign: int) -> None:
    for resource, amount in amounts.items():
        total[resource] += sign * amount
        if not total[resource]:
            del total[resource]


def _quantity(amount: Decimal, resource: str) -> str:
    try:
        return format_quantity(amount, resource=resource)
    except QuantityError:
        return str(amount)


def _check_resources(spec: Mapping[str, Any]) -> None:
    """Raise :class:`UnreadablePod` naming the first resource field of ``spec`` that is not well-formed."""
    if not isinstance(spec, Mapping):
        raise UnreadablePod("spec.pod is not an object")
    holders: list[tuple[str, Any]] = [("spec.pod", spec)]
    for name in _CONTAINER_LISTS:
        containers = spec.get(name)
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise UnreadablePod(f"spec.pod.{name} is not a list")
        holders += [(f"spec.pod.{name}[{index}]", container) for index, container in enumerate(containers)]
    for path, holder in holders:
        if not isinstance(holder, Mapping):
            raise UnreadablePod(f"{path} is not an object")
        resources = holder.get("resources")
        if resources is None:
            continue
        if not isinstance(resources, Mapping):
            raise UnreadablePod(f"{path}.resources is not an object")
        _check_amounts(f"{path}.resources", resources, ("requests", "limits"))
    _check_amounts("spec.pod", spec, ("overhead",))


def _check_amounts(path: str, holder: Mapping[str, Any], fields: Iterable[str]) -> None:
    for name in fields:
        amounts = holder.get(name)
        if amounts is None:
            continue
        if not isinstance(amounts, Mapping):
            raise UnreadablePod(f"{path}.{name} is not an object")
        for resource, amount in amounts.items():
            try:
                parse_quantity(amount)
            except QuantityError as exc:
                raise UnreadablePod(f"{path}.{name}.{resource}: {exc}") from None
