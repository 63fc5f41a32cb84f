"""What each discovered cluster becomes, from every source's table and the ForeignClusters (pure).

The manager's controller (:class:`DiscoveredClusters`, below) acts on these decisions and ``liqoctl discover``
prints them, so the operator reads the very reason the manager acted on. A neighbour is a stranger's claim;
the rules, in the order they are checked (the first that applies decides):

1. our own cluster ID: ignored (a DNS zone may list us; the LAN listener already drops its own echo);
2. expired (its ``expiresAt`` passed: the listener may be dead and its table stale): forgotten;
3. one cluster ID claimed with two keys, in one source or across sources: **Conflict**, neither is used
   (an impostor cannot take a neighbour's place; it can only make the ID unusable while it announces);
4. a ForeignCluster for that ID pins another key: **KeyMismatch**, the record is left untouched (whoever
   announces that ID now is not the cluster this one peers with; an operator clears the pin to re-pin);
5. no source that heard it admits it (each source's deny list, then its allow list): **Denied**;
6. every admitting source says ``Never``: **Listed** (in the sources' status only);
7. otherwise **Known**: the cluster has a ForeignCluster, made here if none exists. With a source saying
   ``Auto``, and a token for that cluster ID in that source's token Secret, the record asks for the peering
   (**Auto**); without a token it stays as Manual would leave it, and says why.

Nothing here weakens authentication: a record made from an announcement pins the announced key, which the
handshake then demands that the provider prove; the token, per provider, is presented only to that cluster.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from liqo.api import names
from liqo.api.discoverysources import ACTED_ON, Heard, PeeringPolicy, Source, Verdict, neighbours_of, source_of
from liqo.api.foreignclusters import ForeignClusters, records_of
from liqo.api.foreignclusters import cluster_id as cluster_id_of
from liqo.api.peerings import wants_outgoing
from liqo.api.resources import DISCOVERY_SOURCES, FOREIGN_CLUSTERS
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import ConflictError
from liqo.kube.events import EventRecorder
from liqo.kube.metrics import CacheGauge
from liqo.kube.objects import Obj
from liqo.kube.resources import NAMESPACES, SECRETS, terminating
from liqo.kube.timefmt import format_time
from liqo.peering.operations import PeerCommand, declare_outgoing

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Decision:
    """One discovered cluster: what it becomes, why, and from which source's claim."""

    cluster_id: str
    verdict: Verdict
    reason: str
    source: str
    """The source whose claim the decision rests on (the first by name among those that heard it)."""
    heard: Heard
    record: str = ""
    """Its ForeignCluster's name, if it has one."""
    token_secret: str = ""
    """With :attr:`Verdict.AUTO`: the Secret holding the token for it."""


def decide(
    sources: Sequence[tuple[Source, Sequence[Heard]]],
    foreign_clusters: Sequence[Mapping[str, Any]],
    *,
    own_id: str,
    tokens: Mapping[str, frozenset[str]],
    now: datetime.datetime,
) -> list[Decision]:
    """A decision for every cluster ID heard and not expired, ordered by cluster ID.

    ``tokens``: for each token Secret the sources name, the cluster IDs it holds a token for.
    """
    claims: dict[str, list[tuple[Source, Heard]]] = {}
    for source, heard in sorted(sources, key=lambda pair: pair[0].name):
        for entry in heard:
            if entry.cluster_id != own_id and entry.expires_at > now:
                claims.setdefault(entry.cluster_id, []).append((source, entry))
    return [
        _decide(cluster_id, claims[cluster_id], foreign_clusters=foreign_clusters, tokens=tokens)
        for cluster_id in sorted(claims)
    ]


def _decide(
    cluster_id: str,
    claims: list[tuple[Source, Heard]],
    *,
    foreign_clusters: Sequence[Mapping[str, Any]],
    tokens: Mapping[str, frozenset[str]],
) -> Decision:
    source, heard = claims[0]
    records = records_of(foreign_clusters, cluster_id)
    record = str(records[0]["metadata"]["name"]) if records else ""

    def decision(verdict: Verdict, reason: str, *, on: Source = source, token_secret: str = "") -> Decision:
        chosen = next(h for s, h in claims if s is on)
        return Decision(cluster_id, verdict, reason, on.name, chosen, record, token_secret)

    keys = sorted({h.key_fingerprint for _, h in claims})
    if len(keys) > 1 or any(h.conflict for _, h in claims):
        where = ", ".join(sorted({s.name for s, _ in claims}))
        return decision(Verdict.CONFLICT, f"two keys claim cluster ID {cluster_id} (heard in {where}): neither is used")
    pinned = str((records[0].get("spec") or {}).get("keyFingerprint") or "") if records else ""
    if pinned and pinned != heard.key_fingerprint:
        return decision(
            Verdict.KEY_MISMATCH,
            f"ForeignCluster {record} pins key {pinned}, but {heard.key_fingerprint} is announced: left untouched"
            " (clear spec.keyFingerprint to trust the new key)",
        )
    admitting = [s for s, h in claims if s.admits(h)]
    if not admitting:
        return decision(Verdict.DENIED, f"denied by the allow and deny lists of {_names(s.name for s, _ in claims)}")
    taking = [s for s in admitting if s.peering is not PeeringPolicy.NEVER]
    if not taking:
        return decision(
            Verdict.LISTED, f"source {_names(s.name for s in admitting)} says peering: Never", on=admitting[0]
        )
    auto = [s for s in taking if s.peering is PeeringPolicy.AUTO]
    with_token = [s for s in auto if cluster_id in tokens.get(s.token_secret, frozenset())]
    if with_token:
        chosen = with_token[0]
        return decision(
            Verdict.AUTO,
            f"peering Auto, with the token for it in Secret {chosen.token_secret}",
            on=chosen,
            token_secret=chosen.token_secret,
        )
    if auto:
        secrets = _names(s.token_secret for s in auto)
        return decision(
            Verdict.KNOWN,
            f"peering Auto, but Secret {secrets} holds no token for {cluster_id}: peer by hand, or add one",
            on=auto[0],
        )
    return decision(Verdict.KNOWN, "peering Manual: liqoctl peer with it to consume its resources", on=taking[0])


def _names(names: Iterable[str]) -> str:
    return ", ".join(sorted(set(names)))


def sources_of(objects: Iterable[Mapping[str, Any]]) -> list[tuple[Source, list[Heard]]]:
    """Every DiscoverySource that can be read (a type this code knows), with what it heard (pure)."""
    read = []
    for obj in objects:
        with contextlib.suppress(KeyError, ValueError):
            read.append((source_of(obj), neighbours_of(obj)))
    return read


def report_rows(decisions: Sequence[Decision], *, now: datetime.datetime) -> list[dict[str, Any]]:
    """What ``liqoctl discover`` prints: one row per discovered cluster (pure)."""
    return [
        {
            "source": d.source,
            "clusterName": d.heard.cluster_name,
            "clusterID": d.cluster_id,
            "authURL": d.heard.auth_url,
            "keyFingerprint": d.heard.key_fingerprint,
            "address": d.heard.address,
            "lastSeen": format_time(d.heard.last_seen) if d.heard.last_seen else None,
            "expiresInSeconds": max(0, int((d.heard.expires_at - now).total_seconds())),
            "verdict": d.verdict.value,
            "reason": d.reason,
            "foreignCluster": d.record or None,
        }
        for d in decisions
    ]


async def token_ids(client: KubeClient, secret: str) -> frozenset[str]:
    """The cluster IDs Secret ``secret`` (in ``liqo``) holds a token for: its data keys."""
    found = await client.get_or_none(SECRETS, secret, namespace=names.LIQO_NAMESPACE)
    return frozenset((found or {}).get("data") or {})


async def current(client: KubeClient, *, own_id: str, now: datetime.datetime) -> list[Decision]:
    """The decisions for the cluster behind ``client``, read afresh (what ``liqoctl discover`` shows)."""
    objects, _ = await client.list_all(DISCOVERY_SOURCES)
    sources = sources_of(objects)
    foreign_clusters, _ = await client.list_all(FOREIGN_CLUSTERS)
    tokens = {s.token_secret: await token_ids(client, s.token_secret) for s, _ in sources if s.token_secret}
    return decide(sources, foreign_clusters, own_id=own_id, tokens=tokens, now=now)


def counted(decisions: Sequence[Decision]) -> list[tuple[tuple[str, str], float]]:
    """The samples of ``liqo_discovered_clusters``: how many decisions per (source, verdict) (pure)."""
    counts: dict[tuple[str, str], float] = {}
    for d in decisions:
        key = (d.source, d.verdict.value)
        counts[key] = counts.get(key, 0.0) + 1.0
    return sorted(counts.items())


def made_here(foreign_cluster: Mapping[str, Any]) -> str:
    """The source a ForeignCluster was made from, if discovery made it ("" otherwise; pure)."""
    return str(((foreign_cluster.get("metadata") or {}).get("labels") or {}).get(names.DISCOVERED_BY) or "")


def expired_records(
    decisions: Sequence[Decision], foreign_clusters: Sequence[Mapping[str, Any]], *, tenants: frozenset[str]
) -> list[Mapping[str, Any]]:
    """The records discovery made that nothing keeps any more (pure).

    Kept: a record whose cluster is still :data:`ACTED_ON`, one that asks for a peering, and one whose peer has
    a tenant namespace here (``tenants``: peer IDs): a peering in either direction, or a handshake under way.
    """
    kept = {d.cluster_id for d in decisions if d.verdict in ACTED_ON}
    return [
        fc
        for fc in foreign_clusters
        if made_here(fc)
        and not terminating(fc)
        and cluster_id_of(fc) not in kept
        and not wants_outgoing(fc)
        and cluster_id_of(fc) not in tenants
    ]


def record_manifest(decision: Decision, *, name: str) -> Obj:
    """The ForeignCluster made for a :data:`Verdict.KNOWN` cluster: its claim, no peering asked (pure)."""
    heard = decision.heard
    return {
        "apiVersion": FOREIGN_CLUSTERS.api_version,
        "kind": FOREIGN_CLUSTERS.kind,
        "metadata": {
            "name": name,
            "labels": names.peer_labels(decision.cluster_id) | {names.DISCOVERED_BY: decision.source},
        },
        "spec": {
            "clusterID": decision.cluster_id,
            "clusterName": heard.cluster_name,
            "authURL": heard.auth_url,
            "keyFingerprint": heard.key_fingerprint,
            "outgoingPeeringEnabled": "No",
        },
    }


# -- the controller --------------------------------------------------------------------------------------

KEY = "discovered"
"""The one item: every decision rests on every source and every record."""
RECHECK = 30.0
"""Seconds between two looks at most: a token added to a source's Secret is seen within this."""


class DiscoveredClusters(Component):
    """Makes, peers with and expires the ForeignClusters of discovered clusters, as :func:`decide` says."""

    def __init__(
        self,
        *,
        client: KubeClient,
        informers: SharedInformers,
        own_id: str,
        events: EventRecorder,
        clock: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ) -> None:
        self._client = client
        self._own_id = own_id
        self._events = events
        self._clock = clock
        self.sources = informers.informer(DISCOVERY_SOURCES)
        self._by_cluster_id = ForeignClusters.shared(informers)
        self.tenants = informers.informer(NAMESPACES, label_selector=f"{names.TENANT}=true")
        self.controller: Controller[str] = Controller(name="discovered-clusters", reconcile=self.reconcile, workers=1)
        for informer in (self.sources, self._by_cluster_id.informer, self.tenants):
            self.controller.watch(informer, lambda _obj: [KEY], coalesce=0.2)
        self._said: dict[str, tuple[Verdict, str]] = {}
        """What each cluster's decision was when last told in an Event (one Event per change)."""
        self.decisions: list[Decision] = []
        """The latest decisions (for metrics)."""

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    @property
    def gauges(self) -> list[CacheGauge]:
        """Discovered clusters by source and verdict, as the latest look decided."""
        return [
            CacheGauge(
                "liqo_discovered_clusters",
                "Clusters a DiscoverySource hears (not expired), by the source the decision rests on and its verdict.",
                ("source", "verdict"),
                lambda: counted(self.decisions),
            )
        ]

    async def reconcile(self, _key: str) -> Result:
        """Act on every decision; look again when the first neighbour would expire."""
        now = self._clock()
        sources = sources_of(self.sources.store.list())
        foreign_clusters = self._by_cluster_id.informer.store.list()
        tokens = {s.token_secret: await token_ids(self._client, s.token_secret) for s, _ in sources if s.token_secret}
        decisions = decide(sources, foreign_clusters, own_id=self._own_id, tokens=tokens, now=now)
        self.decisions = decisions
        for decision in decisions:
            await self._act(decision, tokens_from=decision.token_secret)
        tenants = frozenset(p for t in self.tenants.store.list() if (p := names.tenant_peer_id(t["metadata"]["name"])))
        for fc in expired_records(decisions, foreign_clusters, tenants=tenants):
            meta = fc["metadata"]
            log.info("forgetting discovered cluster %s: no longer heard", cluster_id_of(fc))
            await self._client.delete(FOREIGN_CLUSTERS, meta["name"], uid=meta.get("uid"), missing_ok=True)
        return Result(requeue_after=_next_look(sources, now=now))

    async def _act(self, decision: Decision, *, tokens_from: str) -> None:
        await self._tell(decision)
        if decision.verdict is Verdict.AUTO:
            record = self._by_cluster_id.record_of(decision.cluster_id)
            if record is None or (made_here(record) and not wants_outgoing(record)):
                token = await self._token(tokens_from, decision.cluster_id)
                if token:
                    await declare_outgoing(
                        self._client,
                        PeerCommand(
                            name=decision.heard.cluster_name,
                            auth_url=decision.heard.auth_url,
                            cluster_id=decision.cluster_id,
                            key_fingerprint=decision.heard.key_fingerprint,
                            token=token,
                        ),
                        labels={names.DISCOVERED_BY: decision.source},
                    )
            return
        if decision.verdict is not Verdict.KNOWN or decision.record:
            return
        tenant = self.tenants.store.get(names.tenant_namespace(decision.cluster_id))
        if tenant is not None:
            return  # someone is making its record under the name claimed there (records.ensure_record)
        taken = {fc["metadata"]["name"] for fc in self._by_cluster_id.informer.store.list()}
        candidates = names.foreign_cluster_names(
            cluster_id=decision.cluster_id, cluster_name=decision.heard.cluster_name
        )
        name = next((n for n in candidates if n not in taken), None)
        if name is None:
            return
        try:
            await self._client.create(FOREIGN_CLUSTERS, record_manifest(decision, name=name))
        except ConflictError:
            return  # made meanwhile (by another writer, or for another peer): the next look sees which
        log.info("discovered cluster %s (%s) in %s", decision.cluster_id, decision.heard.cluster_name, decision.source)

    async def _tell(self, decision: Decision) -> None:
        """An Event on the source (and the record, if any) when a cluster's decision changes."""
        said = (decision.verdict, decision.reason)
        if self._said.get(decision.cluster_id) == said:
            return
        self._said[decision.cluster_id] = said
        warning = decision.verdict in (Verdict.CONFLICT, Verdict.KEY_MISMATCH)
        message = (
            f"{decision.heard.cluster_name} ({decision.cluster_id}) at {decision.heard.auth_url}: {decision.reason}"
        )
        targets = [self.sources.store.get(decision.source)]
        if decision.record:
            targets.append(self._by_cluster_id.informer.store.get(decision.record))
        for target in targets:
            if target is not None:
                await self._events.record(
                    target,
                    type="Warning" if warning else "Normal",
                    reason=f"Discovered{decision.verdict}",
                    message=message,
                )

    async def _token(self, secret: str, cluster_id: str) -> str:
        found = await self._client.get_or_none(SECRETS, secret, namespace=names.LIQO_NAMESPACE)
        raw = ((found or {}).get("data") or {}).get(cluster_id)
        return base64.b64decode(raw).decode(errors="replace").strip() if raw else ""


def _next_look(sources: Sequence[tuple[Source, Sequence[Heard]]], *, now: datetime.datetime) -> float:
    """Seconds until the first neighbour expires, at most :data:`RECHECK` (pure)."""
    expiries = [(h.expires_at - now).total_seconds() for _, heard in sources for h in heard if h.expires_at > now]
    return max(0.5, min([RECHECK, *expiries]) + 0.5)
