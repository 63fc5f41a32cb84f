"""One ForeignCluster per peer, whoever makes it: the name its writers agree on before either creates one.

A peer's ForeignCluster has two writers here: ``liqoctl peer`` (our peering with it) and the provisioner (its
enrolment as our consumer). Each looks for the peer's record and makes one only if there is none; but looking
and making are two requests, and in a bidirectional peering both writers run at the same moment for the same
peer (its handshake here while our admin declares ours), each under the name it was told (the peer's own, or
the admin's choice). Kubernetes keeps names unique, not cluster IDs: with nothing more, one writer's record
lands between the other's look and its create, and the peer gets two, which everything keyed by cluster ID
then reads one of and tears down one of.

So before making a record, a writer claims its name on the one object named after the peer's ID that both
writers make first anyway, the peer's tenant namespace: annotation :data:`CLAIM`, written with the namespace's
resourceVersion as precondition, so of two claims one wins and the other reads it (the peer itself cannot
write it: its rights are inside that namespace, not on it). Whoever comes second makes,
or finds, the claimed name: a create that conflicts means the other writer made it (the next look finds it),
or another peer took the name meanwhile (claimed anew). A record or tenant namespace being deleted (an unpeer
finishing) is neither reused nor doubled: the writer is told to try again once it is gone. What to do is a
pure function of what was read (:func:`decide`).

Where a writer reads the ForeignClusters from: ``liqoctl peer``, run once, lists them. The provisioner serves an
endpoint anyone can reach and lists nothing per request (:mod:`liqo.peering.authcaches`): its cache says which
records are the peer's and which names other peers hold, and the records the decision rests on — the peer's
as the cache names them, and the claimed one — are read again by name. The claim is what makes that enough: a
record the other writer made an instant ago is one the cache may not show yet, but never one the tenant
namespace does not name; and a name the cache wrongly shows free costs a create that conflicts, then a look
that reads it under the claim.

A record an admin makes by hand bypasses the claim; one that exists before either writer looks is found, as
any other (by the provisioner once its cache shows it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from liqo.api import names
from liqo.api.foreignclusters import cluster_id, records_of
from liqo.api.resources import FOREIGN_CLUSTERS
from liqo.kube.client import KubeClient
from liqo.kube.errors import ConflictError, NotFoundError
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, terminating

CLAIM = "liqo.io/foreign-cluster"
"""On a peer's tenant namespace: the name of that peer's ForeignCluster, claimed by the first writer to make it."""
ATTEMPTS = 5
"""Looks at most, each after the other writer changed something first."""

_RETRY = "retry once it is gone"


class Seen(Protocol):
    """ForeignClusters as an informer last saw them (the endpoint's :class:`~liqo.peering.authcaches.AuthCaches`)."""

    def foreign_clusters_of(self, peer_id: str) -> list[Obj]:
        """Every ForeignCluster of ``peer_id`` as last seen, by name."""
        ...

    def foreign_cluster_named(self, name: str) -> Obj | None:
        """ForeignCluster ``name`` as last seen, whoever's it is."""
        ...


class RecordError(RuntimeError):
    """No record can be found or made for the peer now; the message says why."""


class RecordBusy(RecordError):
    """The peer's record or tenant namespace is being deleted, or kept changing: try again in a moment."""


@dataclass(frozen=True)
class Existing:
    """The peer has a record: use it."""

    foreign_cluster: Obj


@dataclass(frozen=True)
class Make:
    """Make the record under ``name``, claiming it first unless the tenant namespace already does."""

    name: str
    claim: bool


@dataclass(frozen=True)
class Wait:
    """Nothing can be made until what is being deleted is gone."""

    reason: str


@dataclass(frozen=True)
class Unnamed:
    """Every name the peer's record could have belongs to another peer."""

    reason: str


Decision = Existing | Make | Wait | Unnamed


def claim_of(tenant: Mapping[str, Any]) -> str | None:
    """The record name claimed on a tenant namespace, if any (pure)."""
    claimed = ((tenant.get("metadata") or {}).get("annotations") or {}).get(CLAIM)
    return claimed if isinstance(claimed, str) and claimed else None


def decide(
    *,
    peer_id: str,
    foreign_clusters: Sequence[Mapping[str, Any]],
    tenant: Mapping[str, Any] | None,
    candidates: Sequence[str],
) -> Decision:
    """What a writer of ``peer_id``'s record does, from every ForeignCluster and the peer's tenant namespace (pure).

    ``candidates`` are the names it would give a new record, best first (:func:`liqo.api.names.foreign_cluster_names`).
    """
    ours = records_of(foreign_clusters, peer_id)
    if ours:
        record = ours[0]
        if terminating(record):
            name = record["metadata"]["name"]
            return Wait(f"ForeignCluster {name} of {peer_id} is being deleted (an unpeer finishing): {_RETRY}")
        return Existing(dict(record))
    namespace = names.tenant_namespace(peer_id)
    if tenant is None or terminating(tenant):
        return Wait(f"namespace {namespace} is being deleted (an unpeer finishing): {_RETRY}")
    taken = {str(fc["metadata"]["name"]) for fc in foreign_clusters}
    claimed = claim_of(tenant)
    if claimed is not None and claimed not in taken:
        return Make(claimed, claim=False)
    free = next((name for name in candidates if name not in taken), None)
    if free is None:
        return Unnamed(f"every name for a ForeignCluster of {peer_id} is taken: {', '.join(candidates)}")
    return Make(free, claim=True)


async def _foreign_clusters(
    client: KubeClient, seen: Seen | None, *, peer_id: str, claimed: str | None, candidates: Sequence[str]
) -> list[Obj]:
    """What :func:`decide` needs: every ForeignCluster (a list), or from ``seen`` what bears on ``peer_id``'s record.

    From ``seen``: the peer's records and the claimed one read by name (the one chosen is judged and written
    as it is now), the candidates other peers hold as last seen (the cache only says which names are taken).
    """
    if seen is None:
        listed, _ = await client.list_all(FOREIGN_CLUSTERS)
        return listed
    read = {str(fc["metadata"]["name"]) for fc in seen.foreign_clusters_of(peer_id)}
    if claimed is not None:
        read.add(claimed)
    now: list[Obj] = []
    for name in sorted(read):
        try:
            now.append(await client.get(FOREIGN_CLUSTERS, name))
        except NotFoundError:
            continue  # gone since the cache saw it, or the claimed record not made yet
    held = (seen.foreign_cluster_named(name) for name in candidates if name not in read)
    return now + [fc for fc in held if fc is not None and cluster_id(fc) != peer_id]


async def ensure_record(
    client: KubeClient,
    *,
    peer_id: str,
    candidates: Sequence[str],
    manifest: Callable[[str], Obj],
    seen: Seen | None = None,
) -> tuple[Obj, bool]:
    """``peer_id``'s ForeignCluster, and whether it was made here.

    The one there is, or ``manifest(name)`` created under the name claimed on the peer's tenant namespace,
    which the caller made first. ``seen``: a cache of the ForeignClusters to read them from (None: a list).

    Raises:
        RecordBusy: the record or the tenant namespace is being deleted, or kept changing.
        RecordError: every name the record could have is taken.
    """
    namespace = names.tenant_namespace(peer_id)
    for _ in range(ATTEMPTS):
        # The namespace first: a claim made before this read names the record to read; one made after it makes
        # our own claim conflict.
        try:
            tenant: Obj | None = await client.get(NAMESPACES, namespace)
        except NotFoundError:
            tenant = None
        claimed = claim_of(tenant) if tenant is not None else None
        foreign_clusters = await _foreign_clusters(
            client, seen, peer_id=peer_id, claimed=claimed, candidates=candidates
        )
        decision = decide(peer_id=peer_id, foreign_clusters=foreign_clusters, tenant=tenant, candidates=candidates)
        match decision:
            case Existing(record):
                return record, False
            case Wait(reason):
                raise RecordBusy(reason)
            case Unnamed(reason):
                raise RecordError(reason)
            case Make(name, claim):
                if claim and tenant is not None:
                    rv = tenant["metadata"]["resourceVersion"]
                    patch = {"metadata": {"resourceVersion": rv, "annotations": {CLAIM: name}}}
                    try:
                        await client.patch(NAMESPACES, namespace, patch)
                    except ConflictError:
                        continue  # the namespace moved: perhaps the other writer's claim; look again
                try:
                    created: Obj = await client.create(FOREIGN_CLUSTERS, manifest(name))
                except ConflictError:
                    continue  # the other writer made it (found next), or another peer took the name (claimed anew)
                return created, True
    raise RecordBusy(f"the record of cluster {peer_id} kept changing while it was being made: retry")
