"""How many objects a peer may make on a provider: a ResourceQuota of object counts in each of its namespaces (pure).

A peer writes in its twins (ShadowPods, ConfigMaps, Secrets, Services, EndpointSlices, Ingresses, claims) and in its
tenant namespace (its ResourceRequest, NamespaceMap, NetworkConfig, heartbeat Lease). RBAC says which kinds, never how
many: without a bound, a stranger fills the provider's etcd, and every watch of those kinds on the provider (its
manager's, the API server's own controllers') carries what it wrote. The budget (:mod:`liqo.offloading.budget`)
bounds what *runs*; this bounds what is *stored*.

One ResourceQuota named :data:`~liqo.api.names.PEER_QUOTA` per namespace, written by the provider's manager before
the peer holds any right there (a twin's before its RoleBindings, the tenant's before its RoleBinding), so there is
no moment when the peer writes unbounded. Object counts only (``count/<resource>[.<group>]``): compute resources in
a quota would make the API server refuse every pod without requests, and the budget already counts those.

In the tenant namespace the quota counts Leases only (a create RBAC cannot name): the peer's request, map and
NetworkConfig are one each, by name (the admission policies ``liqo-peer-tenant-writes`` and
``liqo-peer-network-configs``). A quota counting a custom resource has a flaw there: the cluster's quota controller
counts a custom resource only once it has discovered it (every 30 s), and a quota made before that is counted at
its next full resync (5 minutes), every write of that kind refused until then ("status unknown for quota") — a
consumer peering right after the provider's install would wait. A twin counts ShadowPods all the same (there is no
name to hold them to); its quota is made to count again before the consumer gets any right there
(:func:`uncounted`, :func:`recount`).

The numbers are the provider admin's (the manager's ``--twin-quota`` and ``--tenant-quota``, install values
``manager.twinQuota`` and ``manager.tenantQuota``): what they give replaces the default of that resource, the other
defaults stay. The defaults are what a big offloaded namespace needs: hundreds of ConfigMaps and Secrets, thousands
of ShadowPods (the budget still decides how many run), a Secret per ShadowPod for its home token
(:mod:`liqo.virtualkubelet.forge.tokens`). A consumer's twins number at most a NamespaceMap's 1000 entries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from liqo.api import names
from liqo.api.quantity import QuantityError, parse_quantity
from liqo.api.resources import SHADOW_PODS
from liqo.kube.resources import Resource


def _count(plural: str, group: str = "") -> str:
    return f"count/{plural}.{group}" if group else f"count/{plural}"


def _count_of(resource: Resource) -> str:
    return _count(resource.plural, resource.group)


DEFAULT_TWIN_QUOTA: Mapping[str, int] = {
    _count_of(SHADOW_PODS): 2000,
    # One per ShadowPod (its home token), and the namespace's own.
    _count("secrets"): 2500,
    _count("configmaps"): 500,
    _count("services"): 200,
    # The consumer's reflected slices, and the ones this cluster's controller makes for its Services with selectors.
    _count("endpointslices", "discovery.k8s.io"): 1000,
    _count("ingresses", "networking.k8s.io"): 100,
    # Its claims: what they hold is the storage budget's; this bounds how many are stored.
    _count("persistentvolumeclaims"): 200,
}
"""Each twin's bounds, unless the provider's admin says otherwise."""
DEFAULT_TENANT_QUOTA: Mapping[str, int] = {_count("leases", "coordination.k8s.io"): 10}
"""Each consumer's tenant namespace's bounds: its heartbeat Lease, and room to spare."""


def parse_quota(text: str, *, flag: str, defaults: Mapping[str, int]) -> dict[str, int]:
    """The bounds a flag gives: a JSON object of ``count/...`` resource → count, over ``defaults`` (pure).

    JSON because the chart renders it with ``toJson`` (Helm's numbers are floats: ``1e+06`` elsewhere).

    Raises:
        ValueError: not a JSON object, a key that is not an object count, or a count that is not a whole number
            of 0 or more; the message names ``flag`` and the key.
    """
    try:
        given = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ValueError(f"{flag}: not JSON ({exc.msg})") from None
    if not isinstance(given, dict):
        raise ValueError(f"{flag}: expected a JSON object of count/<resource> to a number, got {text!r}")
    bounds = dict(defaults)
    for key, value in given.items():
        if not key.startswith("count/") or len(key) == len("count/"):
            raise ValueError(f"{flag}: {key!r} is not an object count (count/<resource>[.<group>])")
        if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
            raise ValueError(f"{flag}: {key}: expected a whole number of 0 or more, got {value!r}")
        bounds[key] = int(value)
    return bounds


def quota_flag(bounds: Mapping[str, int]) -> str:
    """``bounds`` as a flag's value: what :func:`parse_quota` reads back (pure)."""
    return json.dumps(dict(bounds), sort_keys=True, separators=(",", ":"))


def object_quota(*, namespace: str, peer_id: str, hard: Mapping[str, int]) -> dict[str, Any]:
    """The ResourceQuota bounding what ``peer_id`` may make in ``namespace`` (pure)."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": names.PEER_QUOTA, "namespace": namespace, "labels": names.peer_labels(peer_id)},
        "spec": {"hard": {resource: str(count) for resource, count in sorted(hard.items())}},
    }


def _amounts(hard: object) -> dict[str, Decimal] | None:
    """A quota's ``hard`` (spec or status) as numbers: the API server writes ``2000`` back as ``2k``."""
    if not isinstance(hard, Mapping):
        return None
    try:
        return {str(key): parse_quantity(value) for key, value in hard.items()}
    except QuantityError:
        return None


def quota_matches(current: Mapping[str, Any] | None, desired: Mapping[str, Any]) -> bool:
    """Whether the quota as read bounds what ``desired`` does (pure)."""
    if current is None:
        return False
    return _amounts((current.get("spec") or {}).get("hard")) == _amounts(desired["spec"]["hard"])


def quota_counted(quota: Mapping[str, Any]) -> bool:
    """Whether the cluster's quota controller has counted every resource ``quota`` bounds (pure).

    Until it has, the API server refuses every write of those kinds in the namespace ("status unknown for
    quota"): a twin is handed to its consumer only once its quota counts.
    """
    status = quota.get("status") or {}
    hard = _amounts((quota.get("spec") or {}).get("hard"))
    counted, used = _amounts(status.get("hard")), _amounts(status.get("used"))
    return hard is not None and counted == hard and used is not None and set(hard) <= set(used)


def uncounted(quota: Mapping[str, Any]) -> list[str]:
    """The bounds the quota controller reported without counting them: the custom resources it did not know yet.

    Pure. Empty while it has not reported the quota as it is at all (it will), or once everything is counted.
    """
    spec, status = _amounts((quota.get("spec") or {}).get("hard")), quota.get("status") or {}
    used = _amounts(status.get("used")) or {}
    if spec is None or _amounts(status.get("hard")) != spec:
        return []
    return sorted(key for key in spec if key not in used)


def recount(desired: Mapping[str, Any], *, keys: list[str]) -> dict[str, Any]:
    """``desired`` without ``keys``: a change of its bounds, which makes the quota controller count it again (pure).

    It counts a quota again when it is made or its bounds change, or at its full resync; applying ``desired`` after
    this is the second change, counted with the resources it has discovered since. Only for a quota no one holds a
    right under yet: for a moment ``keys`` are not bounded.
    """
    hard = {key: value for key, value in desired["spec"]["hard"].items() if key not in keys}
    return {**desired, "spec": {**desired["spec"], "hard": hard}}


def quota_state(quota: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a controller keeping ``quota`` reads of it: its bounds, and what of them is counted (pure).

    Not how much is used: that moves with every object made under it.
    """
    return (_amounts((quota.get("spec") or {}).get("hard")), quota_counted(quota), tuple(uncounted(quota)))
