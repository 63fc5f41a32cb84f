"""The provider's sharing decisions: which policy applies to a consumer, what it offers, when to re-offer.

A SharingPolicy naming the consumer's cluster ID beats the default policy (one naming nobody), and among
equals the first by name wins, so adding an unrelated policy never changes anyone's offer. Consumers are
named by cluster ID only, the one their certificate proves: a cluster name is whatever the consumer says,
so a policy matching names could be dodged (or borrowed) by renaming.
Without any policy a provider shares half of its free capacity, as docs/peering.md promises.

Offers are rounded down to what a quantity can hold before anything else sees them: the amounts compared
with the published offer are then exactly the published ones, so an unchanged cluster never looks changed.

When an offer is rewritten (:func:`next_refresh`) is a trade between two costs. Every write cascades: the
ResourceOffer is replicated to the consumer, which updates its VirtualNode, which the virtual kubelet
applies to the Node (spec, status, Lease). A provider placing a burst of pods would rewrite its offer for
each if every change were published: the largest slot shrinks with nearly every pod placed. Yet a stale
offer costs something too, and what it costs decides how stale it may be:

- An offer is the consumer's budget. Smaller than what the provider could now give, it only holds the
  consumer back until republished. Larger (the capacity shrank), it lets the consumer over-commit: send
  pods the provider's nodes no longer have room for, which pass the provider's budget
  (``liqo.offloading.budget`` checks the accepted offer) and wait Pending there. So an amount
  that moved by more than the policy's threshold, either way, is republished at once.
- A slot is what the consumer's virtual kubelet checks before sending a pod; the provider's scheduler is
  the real guard. A stale, larger slot therefore never over-commits a node: it costs, at worst, a pod
  sent that waits Pending on the provider until room frees, instead of Pending at home. That is only
  possible for a pod larger than what is left, and a shrink within the threshold leaves at most the
  threshold's margin for such pods. So a slot that shrank (or grew) by more than the threshold is
  republished at once (:attr:`Drift.MAJOR`), as is one that vanished (no node takes a pod any more).
- Smaller shrinks — of a slot, or of an amount, within the threshold — are republished at a bounded rate,
  :data:`REPUBLISH_SECONDS` after the previous write, so that the consumer catches up within half a minute
  without a write per pod. A growth within the threshold waits for the next refresh.
- Whatever else the offer says (labels, prices) is republished at once, and every offer is refreshed when a
  third of its lifetime or less is left, so a consumer never holds an offer that lapsed.

A burst of pods thus costs a number of writes that grows with the logarithm of how much of the capacity
it takes (one per threshold-sized step) plus one per :data:`REPUBLISH_SECONDS` of the burst, not one per
pod.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from liqo.api import names
from liqo.api.networks import PodNetwork
from liqo.api.podrequests import covers
from liqo.api.quantity import QuantityError, format_quantity, parse_quantity, round_down
from liqo.api.storage import VIRTUAL_CLASS, ClassOffer, class_offers, storage_items
from liqo.api.workingmodes import ACCEPTS_TETHERING, TETHERED
from liqo.kube.timefmt import as_utc, format_time, parse_time

SHARE = "Share"
DENY = "Deny"
DEFAULT_PERCENTAGE = 50
DEFAULT_REFRESH_THRESHOLD_PERCENT = 10
DEFAULT_OFFER_TTL_SECONDS = 300
BASELINE = "baseline"
RESTRICTED = "restricted"
DEFAULT_MAX_GRACE_SECONDS = 120
REPUBLISH_SECONDS = 30
"""The shortest time between two writes of an offer for a shrink within the threshold (see the module's note)."""


@dataclass(frozen=True)
class PodSecurity:
    """What a provider lets one consumer's pods do (a SharingPolicy's ``podSecurity``, defaults filled in)."""

    level: str = BASELINE
    """The Pod Security Standards profile (``baseline`` or ``restricted``) the pods must meet."""
    tolerations: tuple[Mapping[str, str], ...] = ()
    """The only tolerations the pods may carry."""
    storage: tuple[ClassOffer, ...] = ()
    """The StorageClasses offered (the policy's ``spec.storage``): the only ones the pods' claims may name. None:
    the pods use no PersistentVolumeClaim and no generic ephemeral volume."""
    max_grace_seconds: int = DEFAULT_MAX_GRACE_SECONDS
    """The longest termination grace period the pods get."""
    allowed_label_keys: tuple[str, ...] = ()
    """Label keys the pods may carry beyond the built-in few (``liqo.offloading.podsecurity.LABEL_KEYS``):
    keys, or ``prefix/*``."""
    allowed_annotation_keys: tuple[str, ...] = ()
    """Annotation keys the pods may carry beyond the built-in few (``ANNOTATION_KEYS`` there)."""

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None, *, storage: tuple[ClassOffer, ...] = ()) -> PodSecurity:
        """The ``podSecurity`` of a SharingPolicy ``spec`` (absent: the defaults), with its ``storage``."""
        spec = spec or {}
        return cls(
            level=spec.get("level", BASELINE),
            tolerations=tuple(dict(t) for t in spec.get("tolerations") or ()),
            storage=storage,
            max_grace_seconds=int(spec.get("maxTerminationGracePeriodSeconds", DEFAULT_MAX_GRACE_SECONDS)),
            allowed_label_keys=tuple(spec.get("allowedLabelKeys") or ()),
            allowed_annotation_keys=tuple(spec.get("allowedAnnotationKeys") or ()),
        )


@dataclass(frozen=True)
class IngressOffer:
    """What a provider lets one consumer's Ingresses say (a SharingPolicy's ``ingress``; absent: nothing)."""

    classes: tuple[str, ...] = ()
    """The IngressClasses they may name; none: no Ingress of the consumer's is accepted."""
    hosts: tuple[str, ...] = ()
    """The hosts they may name: exact, or ``*.`` and a domain for any name under it."""
    annotations: tuple[str, ...] = ()
    """The annotation keys they may carry beyond the built-in few."""

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None) -> IngressOffer:
        """The ``ingress`` of a SharingPolicy ``spec`` (absent: nothing offered)."""
        spec = spec or {}
        return cls(
            classes=tuple(spec.get("classes") or ()),
            hosts=tuple(spec.get("hosts") or ()),
            annotations=tuple(spec.get("annotations") or ()),
        )


@dataclass(frozen=True)
class Policy:
    """A SharingPolicy's ``spec``, parsed, with the CRD's defaults filled in."""

    name: str
    """The SharingPolicy's name (``""`` for the built-in default), to say which policy decided."""
    action: str = SHARE
    """``Share`` or ``Deny``."""
    peers: frozenset[str] = frozenset()
    """Cluster IDs; empty: the default for every peer no other policy names."""
    percentage: int = DEFAULT_PERCENTAGE
    """The share of the free capacity to offer, 1-100."""
    limits: Mapping[str, Decimal] = field(default_factory=dict)
    """Absolute caps on the offer, per resource."""
    resources: frozenset[str] = frozenset()
    """Which resources to offer; empty: every resource of the free capacity."""
    prices: Mapping[str, str] = field(default_factory=dict)
    """The price per resource unit-hour, as the admin wrote it (prices are passed on, never computed)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Labels for the consumers' virtual nodes."""
    refresh_threshold_percent: int = DEFAULT_REFRESH_THRESHOLD_PERCENT
    offer_ttl_seconds: int = DEFAULT_OFFER_TTL_SECONDS
    pod_security: PodSecurity = field(default_factory=PodSecurity)
    """What the consumer's pods may do here."""
    count_limits: bool = True
    """Whether the declared limits of the consumer's pods must also add up within the accepted offer."""
    allowed_twin_names: tuple[str, ...] = ()
    """The twin namespace names the consumer may choose itself (names, or prefixes ending in ``*``); none by
    default: the provider names every twin."""
    pod_network: PodNetwork = field(default_factory=PodNetwork)
    """Where the consumer's pods may connect, and from where they may be reached, besides their own pods, the
    cluster DNS and their gateway (every twin's NetworkPolicy); nothing by default."""
    ingress: IngressOffer = field(default_factory=IngressOffer)
    """What the consumer's Ingresses may say here."""
    accepts_tethering: bool = False
    """Whether the consumer may tether itself to this cluster (``tethering: Accept``)."""
    tethered: bool = False
    """This cluster is tethered to the consumer: never from a SharingPolicy, only :func:`tethered_policy`."""

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Policy:
        """The policy of a SharingPolicy object.

        Raises:
            QuantityError: A limit or price is not a quantity (the CRD's schema normally prevents it). A
                malformed policy fails loudly rather than being skipped: skipping a ``Deny`` would share.
        """
        spec = obj.get("spec") or {}
        return cls(
            name=obj["metadata"]["name"],
            action=spec.get("action", SHARE),
            peers=frozenset(spec.get("peers") or ()),
            percentage=spec.get("percentage", DEFAULT_PERCENTAGE),
            limits={name: parse_quantity(amount) for name, amount in (spec.get("limits") or {}).items()},
            resources=frozenset(spec.get("resources") or ()),
            prices={name: _checked_quantity(amount) for name, amount in (spec.get("prices") or {}).items()},
            labels=dict(spec.get("labels") or {}),
            refresh_threshold_percent=spec.get("refreshThresholdPercent", DEFAULT_REFRESH_THRESHOLD_PERCENT),
            offer_ttl_seconds=spec.get("offerTTLSeconds", DEFAULT_OFFER_TTL_SECONDS),
            pod_security=PodSecurity.from_spec(spec.get("podSecurity"), storage=class_offers(spec.get("storage"))),
            count_limits=bool(spec.get("countLimits", True)),
            allowed_twin_names=tuple(spec.get("allowedTwinNames") or ()),
            pod_network=PodNetwork.from_spec(spec.get("podNetwork")),
            ingress=IngressOffer.from_spec(spec.get("ingress")),
            accepts_tethering=spec.get("tethering") == "Accept",
        )


BUILT_IN_DEFAULT = Policy(name="")
"""What applies when no SharingPolicy does: share 50 % of the free capacity."""


def tethered_policy(policy: Policy) -> Policy:
    """What this cluster offers the peer it is tethered to (pure): all it has, its virtual node marked.

    The peer's own policy is set aside while the tether lasts (and applies again after): a tethered cluster
    gives its controlling peer every resource of its nodes, as the seed's working modes say, and that peer's
    virtual node for it carries :data:`~liqo.api.names.TETHERED_DEVICE` for its users to select or avoid.
    What the peer's pods may do here (pod security, network, ingress) stays what the policy says.
    """
    return replace(
        policy,
        action=SHARE,
        percentage=100,
        limits={},
        resources=frozenset(),
        labels={**policy.labels, names.TETHERED_DEVICE: "true"},
        tethered=True,
    )


def select_policy(policies: Iterable[Mapping[str, Any]], *, peer_id: str) -> Policy:
    """The policy that applies to the peer whose authenticated cluster ID is ``peer_id``.

    Args:
        policies: SharingPolicy objects.
        peer_id: The peer's cluster ID (from its certificate or its NamespaceMap's namespace, never from a
            field the peer writes).

    Returns:
        The first by name of the policies naming the peer; else the first by name of the default policies
        (empty ``peers``); else :data:`BUILT_IN_DEFAULT`.
    """
    naming, defaults = [], []
    for policy in policies:
        peers = set((policy.get("spec") or {}).get("peers") or ())
        if not peers:
            defaults.append(policy)
        elif peer_id in peers:
            naming.append(policy)
    chosen = naming or defaults
    if not chosen:
        return BUILT_IN_DEFAULT
    return Policy.from_object(min(chosen, key=lambda policy: str(policy["metadata"]["name"])))


class PolicySelection:
    """:func:`select_policy`, remembered until a SharingPolicy changes.

    The provider's ShadowPod webhook and controller ask for a consumer's policy for every pod; choosing and
    parsing it afresh each time (quantities, prices) would be work per pod on the hot path of offloading,
    for an answer that changes only when an admin edits a SharingPolicy (a new resourceVersion).
    """

    def __init__(self) -> None:
        self._versions: tuple[tuple[str, str], ...] = ()
        self._chosen: dict[str, Policy] = {}

    def __call__(self, policies: Sequence[Mapping[str, Any]], peer_id: str) -> Policy:
        """The policy of ``peer_id`` among ``policies`` (as :func:`select_policy`)."""
        versions = tuple(sorted((p["metadata"]["name"], p["metadata"].get("resourceVersion", "")) for p in policies))
        if versions != self._versions:
            self._versions, self._chosen = versions, {}
        chosen = self._chosen.get(peer_id)
        if chosen is None:
            chosen = self._chosen[peer_id] = select_policy(policies, peer_id=peer_id)
        return chosen


WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"


def storage_left_out(policy: Policy, storage_classes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The classes of ``policy``'s ``storage`` no budget can hold, each with why (pure).

    A class that does not exist, or binds its claims at once (``volumeBindingMode`` not ``WaitForFirstConsumer``):
    its volumes would be made as soon as a peer's claim is stored, before any pod of the peer's is admitted, so no
    budget could stop them (:mod:`liqo.offloading.budget`). Nor the virtual class ``liqo``: its volumes are this
    cluster's providers', which a peer of ours was never offered.

    Args:
        policy: The policy applying to the consumer.
        storage_classes: This cluster's StorageClasses by name.
    """
    why = {}
    for offer in policy.pod_security.storage:
        found = storage_classes.get(offer.name)
        if found is None:
            why[offer.name] = "no such StorageClass here"
        elif offer.name == VIRTUAL_CLASS:
            why[offer.name] = "the virtual class holds no volume of this cluster's, only its providers'"
        elif found.get("volumeBindingMode") != WAIT_FOR_FIRST_CONSUMER:
            mode = found.get("volumeBindingMode") or "Immediate"
            why[offer.name] = (
                f"its volumeBindingMode is {mode}: a volume would be made for each claim a peer stores, before any"
                " budget could count it; only classes that wait for a first consumer are offered"
            )
    return why


def budgetable_storage(policy: Policy, storage_classes: Mapping[str, Mapping[str, Any]]) -> Policy:
    """``policy`` offering only the classes of its ``storage`` a budget can hold (:func:`storage_left_out`; pure)."""
    left_out = storage_left_out(policy, storage_classes)
    if not left_out:
        return policy
    kept = tuple(offer for offer in policy.pod_security.storage if offer.name not in left_out)
    return replace(policy, pod_security=replace(policy.pod_security, storage=kept))


def compute_offer(free: Mapping[str, Decimal], policy: Policy) -> dict[str, Decimal] | None:
    """What ``policy`` offers out of ``free`` capacity.

    Args:
        free: The free capacity (see :meth:`liqo.sharing.capacity.CapacityLedger.free`).
        policy: The policy applying to the consumer.

    Returns:
        ``None`` if the policy denies the consumer. Otherwise, for every shared resource present in
        ``free``: ``min(free * percentage / 100, limit)``, rounded down to what a quantity can express.
    """
    if policy.action == DENY:
        return None
    shared = policy.resources or free.keys()
    offer: dict[str, Decimal] = {}
    for resource in sorted(shared & free.keys()):
        amount = free[resource] * policy.percentage / 100
        if resource in policy.limits:
            amount = min(amount, policy.limits[resource])
        offer[resource] = round_down(amount, resource=resource)
    return offer


def offer_spec(
    *,
    provider_id: str,
    provider_name: str,
    resources: Mapping[str, Decimal],
    slots: Sequence[Mapping[str, Decimal]],
    policy: Policy,
    now: datetime.datetime,
) -> dict[str, Any]:
    """The ``spec`` of the ResourceOffer making ``resources`` under ``policy`` at ``now``.

    Args:
        provider_id: This cluster's ID.
        provider_name: This cluster's name.
        resources: The offer, as :func:`compute_offer` returns it.
        slots: Its largest slots, as :func:`liqo.sharing.capacity.largest_slots` returns them.
        policy: The policy it was computed under (labels, prices, lifetime).
        now: The current time (timezone-aware).

    Returns:
        ``providerClusterID``, ``providerClusterName``, ``resources`` and ``prices`` (quantities; prices only
        for offered resources), ``largestSlots`` (quantities), ``labels`` and ``storage`` (if any), ``timestamp``
        and ``expiry`` (``timestamp`` + the policy's TTL), as RFC 3339 UTC times to the second; ``acceptsTethering`` and
        ``tethered`` when true.
    """
    # Truncated to the second like every Kubernetes timestamp; the expiry moves earlier, never later.
    timestamp = as_utc(now).replace(microsecond=0)
    flags = {ACCEPTS_TETHERING: policy.accepts_tethering, TETHERED: policy.tethered}
    # No labels means no field: applied empty after keys this manager owned (a tether's mark), server-side
    # apply leaves ``labels: null``, which the schema refuses, and the offer could not change any more.
    labels = {"labels": dict(policy.labels)} if policy.labels else {}
    storage = {"storage": storage_items(policy.pod_security.storage)} if policy.pod_security.storage else {}
    return {
        "providerClusterID": provider_id,
        "providerClusterName": provider_name,
        "resources": _formatted(resources),
        "largestSlots": [_formatted(slot) for slot in slots],
        **labels,
        **storage,
        "prices": {name: price for name, price in policy.prices.items() if name in resources},
        "timestamp": format_time(timestamp),
        "expiry": format_time(timestamp + datetime.timedelta(seconds=policy.offer_ttl_seconds)),
    } | {flag: True for flag, on in flags.items() if on}


class Drift(enum.Enum):
    """How far the slots computed now are from the published ones (:func:`slot_drift`)."""

    NONE = "none"
    """Equal, reordered, or grown within the threshold: nothing worth a write."""
    MINOR = "minor"
    """A published slot shrank, within the threshold: republished at the bounded rate."""
    MAJOR = "major"
    """A published slot shrank, or a slot grew, beyond the threshold (or appeared, or vanished): at once."""


def slot_drift(
    published: Sequence[Mapping[str, Decimal]], current: Sequence[Mapping[str, Decimal]], *, threshold_percent: int
) -> Drift:
    """How the ``current`` slots differ from the ``published`` ones (pure).

    MAJOR if a published slot shrank beyond ``threshold_percent`` — no current slot, enlarged by it, covers
    it — or a current slot grew beyond it — no published slot, enlarged by it, covers it; MINOR if a
    published slot shrank at all (no current slot covers it); NONE otherwise.
    """

    def enlarged(slots: Sequence[Mapping[str, Decimal]]) -> list[dict[str, Decimal]]:
        return [{r: amount * (100 + threshold_percent) / 100 for r, amount in slot.items()} for slot in slots]

    def all_covered(slots: Sequence[Mapping[str, Decimal]], by: Sequence[Mapping[str, Decimal]]) -> bool:
        return all(any(covers(other, slot) for other in by) for slot in slots)

    if not all_covered(current, enlarged(published)) or not all_covered(published, enlarged(current)):
        return Drift.MAJOR
    return Drift.NONE if all_covered(published, current) else Drift.MINOR


def next_refresh(
    current_spec: Mapping[str, Any] | None,
    new_resources: Mapping[str, Decimal],
    policy: Policy,
    *,
    new_slots: Sequence[Mapping[str, Decimal]],
    now: datetime.datetime,
) -> datetime.datetime:
    """When the published offer ``current_spec`` must be replaced by one offering ``new_resources`` (pure).

    Args:
        current_spec: The published ResourceOffer's ``spec``, or ``None`` if there is none.
        new_resources: The offer computed now, as :func:`compute_offer` returns it.
        policy: The policy the new offer is computed under.
        new_slots: The largest slots computed now (:func:`liqo.sharing.capacity.largest_slots`).
        now: The current time (timezone-aware).

    Returns:
        ``now`` — replace it at once — if there is no offer; if a resource appeared, disappeared or moved by
        more than ``refresh_threshold_percent`` of its published amount; if the slots drifted beyond it
        (:attr:`Drift.MAJOR`); if the labels, storage or prices the policy gives differ from the published ones; or
        if a field needed here is unreadable. Otherwise the earliest of: a third of the policy's TTL before
        expiry; and, if an amount decreased or a slot shrank within the threshold, :data:`REPUBLISH_SECONDS`
        after the published ``timestamp``. A time not after ``now`` means "now".
    """
    now = as_utc(now)
    if current_spec is None:
        return now
    try:
        published_slots = [_parsed(slot) for slot in current_spec["largestSlots"]]
        current = _parsed(current_spec.get("resources") or {})
        expiry = parse_time(str(current_spec["expiry"]))
    except (KeyError, TypeError, AttributeError, ValueError, QuantityError):
        return now
    threshold = policy.refresh_threshold_percent
    drift = slot_drift(published_slots, new_slots, threshold_percent=threshold)
    if (
        drift is Drift.MAJOR
        or current.keys() != new_resources.keys()
        or any(abs(amount - current[name]) * 100 > current[name] * threshold for name, amount in new_resources.items())
        or (current_spec.get("labels") or {}) != dict(policy.labels)
        or (current_spec.get("storage") or []) != storage_items(policy.pod_security.storage)
        or (current_spec.get("prices") or {}) != {n: p for n, p in policy.prices.items() if n in new_resources}
        or bool(current_spec.get(ACCEPTS_TETHERING)) != policy.accepts_tethering
        or bool(current_spec.get(TETHERED)) != policy.tethered
    ):
        return now
    due = expiry - datetime.timedelta(seconds=policy.offer_ttl_seconds / 3)
    if drift is Drift.MINOR or any(amount < current[name] for name, amount in new_resources.items()):
        try:
            published_at = parse_time(str(current_spec["timestamp"]))
        except (KeyError, ValueError):
            return now
        due = min(due, published_at + datetime.timedelta(seconds=REPUBLISH_SECONDS))
    return due


def _formatted(resources: Mapping[str, Decimal]) -> dict[str, str]:
    return {name: format_quantity(amount, resource=name) for name, amount in resources.items()}


def _parsed(resources: Mapping[str, str | int]) -> dict[str, Decimal]:
    return {name: parse_quantity(amount) for name, amount in resources.items()}


def _checked_quantity(amount: str | int) -> str:
    parse_quantity(amount)
    return str(amount)
