"""What ``liqoctl peer``, ``unpeer``, ``info`` and friends do, as functions over API clients.

The CLI is a thin shell over these. Peering only declares intent — a ForeignCluster with
``outgoingPeeringEnabled: Yes`` and the enrolment token the provider minted for it — and then waits, with a
deadline, for the managers to converge, reporting which step it is waiting for. Every wait is bounded and
every failure names the condition that did not come true and its message.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from liqo.api import names
from liqo.api.crds.schema import KEY_FINGERPRINT_PATTERN
from liqo.api.foreignclusters import ConditionStatus as Status
from liqo.api.foreignclusters import ConditionType, Reason, cluster_id, named, record_of
from liqo.api.identity import ClusterIdentity, read_identity
from liqo.api.networks import NETWORK
from liqo.api.offers import OfferPhase
from liqo.api.peers import kubeconfig_of
from liqo.api.resources import FOREIGN_CLUSTERS, RESOURCE_OFFERS, RESOURCE_REQUESTS, VIRTUAL_NODES, WORKING_MODES
from liqo.api.workingmodes import NAME as WORKING_MODE
from liqo.api.workingmodes import WorkingModeSpec, tethered_to
from liqo.kube.client import KubeClient
from liqo.kube.errors import InvalidError, NotFoundError
from liqo.kube.resources import NAMESPACES, SECRETS
from liqo.kube.timefmt import format_micro_time, parse_time
from liqo.kube.waiting import WaitTimeout, changes_only, poll_until
from liqo.peering import authclient, enrolment, records
from liqo.peering.outgoing import PEERING_REQUESTED
from liqo.peering.tenants import tenant_namespace_manifest
from liqo.peering.tokens import DEFAULT_VALIDITY, PEER_VALIDITY, EnrolmentToken

Progress = Callable[[str], None]

PEER_TIMEOUT = 60.0
UNPEER_TIMEOUT = 60.0


class PeeringError(RuntimeError):
    """A peering operation cannot proceed or did not converge; the message says where it stopped."""


@dataclass(frozen=True)
class PeerCommand:
    """What a consumer needs to peer out of band: where the provider is, its key, and the token to enrol."""

    name: str
    auth_url: str
    cluster_id: str
    key_fingerprint: str
    token: str
    enrolment: EnrolmentToken | None = None
    """The provider's record of ``token`` when it was just minted (its ID and expiry, to tell the operator)."""

    def render(self) -> str:
        """The command line to run on the consumer."""
        return (
            f"liqoctl peer out-of-band {self.name} --auth-url {self.auth_url} --cluster-id {self.cluster_id} "
            f"--key-fingerprint {self.key_fingerprint} --auth-token {self.token}"
        )


async def installed(client: KubeClient, *, role: str) -> ClusterIdentity:
    """The identity of the cluster behind ``client``, or a clear error if liqo is not installed there."""
    identity = await read_identity(client)
    if identity is None:
        raise PeeringError(
            f"liqo is not installed on the {role} cluster ({client.server}): run `liqoctl install` there"
        )
    return identity


async def peer_command(client: KubeClient, *, valid_for: datetime.timedelta = DEFAULT_VALIDITY) -> PeerCommand:
    """The out-of-band peer command for this (provider) cluster: its identity, its key and a new token.

    The token is minted for this command alone: it enrols one cluster, once, within ``valid_for``
    (:mod:`liqo.peering.tokens`); every consumer already enrolled renews with its key and needs none.
    """
    identity = await installed(client, role="provider")
    if not identity.key_fingerprint:
        raise PeeringError("this cluster has no cluster key yet: run `liqoctl install` again to create it")
    token, recorded = await enrolment.mint(client, valid_for=valid_for)
    return PeerCommand(
        identity.cluster_name, identity.auth_url, identity.cluster_id, identity.key_fingerprint, token, recorded
    )


async def peer_out_of_band(
    client: KubeClient, command: PeerCommand, *, offer_policy: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Declare an outgoing peering on the consumer behind ``client``; return its ForeignCluster.

    The provider's ``/ids`` is checked first, so a wrong URL, cluster ID or fingerprint fails here, clearly,
    instead of in the manager later (``/ids`` is unauthenticated: the manager still verifies the provider's
    signature on every answer).
    """
    local = await installed(client, role="consumer")
    if command.cluster_id == local.cluster_id:
        raise PeeringError("a cluster cannot peer with itself")
    if not re.fullmatch(KEY_FINGERPRINT_PATTERN, command.key_fingerprint):
        raise PeeringError(
            f"{command.key_fingerprint!r} is not a key fingerprint (sha256:<64 hex digits>, as"
            " `liqoctl generate peer-command` prints it)"
        )
    try:
        ids = await authclient.fetch_ids(command.auth_url)
    except authclient.AuthError as exc:
        raise PeeringError(f"cannot reach the provider's authentication endpoint {command.auth_url}: {exc}") from exc
    if ids.cluster_id != command.cluster_id:
        raise PeeringError(
            f"{command.auth_url} belongs to cluster {ids.cluster_name} ({ids.cluster_id}), not to {command.cluster_id}"
        )
    if ids.key_fingerprint != command.key_fingerprint:
        raise PeeringError(
            f"{command.auth_url} presents key {ids.key_fingerprint}, not {command.key_fingerprint}: check the"
            " command (or someone else answers at that address)"
        )
    return await declare_outgoing(client, command, offer_policy=offer_policy)


async def declare_outgoing(
    client: KubeClient,
    command: PeerCommand,
    *,
    offer_policy: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Declare an outgoing peering with the provider ``command`` names, checked or not; return its ForeignCluster.

    The one way a peering is asked for, by ``liqoctl peer`` (which checked the provider first) and by discovery
    under an ``Auto`` policy (the manager's handshake checks it): the tenant namespace, the ForeignCluster
    (found, or made under the name claimed there), then the token. ``labels`` go on the ForeignCluster besides
    the peer's; applied by the one field manager, what an earlier declaration labelled and this one does not
    goes (a discovered record peered by hand is a manual one from then on).
    """
    spec: dict[str, Any] = {
        "clusterID": command.cluster_id,
        "clusterName": command.name,
        "authURL": command.auth_url,
        "outgoingPeeringEnabled": "Yes",
        "keyFingerprint": command.key_fingerprint,
    }
    if offer_policy:
        spec["offerPolicy"] = offer_policy

    def body(name: str) -> dict[str, Any]:
        return {
            "apiVersion": FOREIGN_CLUSTERS.api_version,
            "kind": FOREIGN_CLUSTERS.kind,
            "metadata": {
                "name": name,
                "labels": names.peer_labels(command.cluster_id) | (labels or {}),
                # A change the manager sees even when nothing else changed: it tries again at once.
                "annotations": {PEERING_REQUESTED: _now()},
            },
            "spec": spec,
        }

    # The tenant namespace first: the record's name is claimed there, so that this very cluster enrolling
    # here as our consumer at the same moment (the provisioner) finds ours rather than making a second one.
    await client.apply(NAMESPACES, tenant_namespace_manifest(command.cluster_id))
    try:
        record, _ = await records.ensure_record(
            client,
            peer_id=command.cluster_id,
            candidates=names.foreign_cluster_names(cluster_id=command.cluster_id, cluster_name=command.name),
            manifest=body,
        )
    except records.RecordError as exc:
        raise PeeringError(f"no ForeignCluster for {command.cluster_id} now: {exc}") from exc
    name = record["metadata"]["name"]
    # Applied even over the record just made: what a later `liqoctl peer` leaves out (an offer policy) goes.
    # The ForeignCluster before the token: its manager must see the intent before the token it acts on.
    try:
        applied: dict[str, Any] = await client.apply(FOREIGN_CLUSTERS, body(name))
    except InvalidError as exc:  # clusterID is immutable: another peer's ForeignCluster is never taken over
        raise PeeringError(f"ForeignCluster {name} was just created for another peer: try again ({exc})") from exc
    await client.apply(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": names.PEER_TOKEN_SECRET,
                "namespace": names.tenant_namespace(command.cluster_id),
                "labels": names.peer_labels(command.cluster_id),
            },
            "type": "Opaque",
            "data": {"token": base64.b64encode(command.token.encode()).decode()},
        },
    )
    return applied


async def peer(
    consumer: KubeClient,
    provider: KubeClient,
    *,
    offer_policy: dict[str, Any] | None = None,
    timeout: float = PEER_TIMEOUT,
    progress: Progress = lambda _: None,
) -> dict[str, Any]:
    """Peer ``consumer`` → ``provider`` with both at hand; return the accepted offer once there is one.

    The consumer gets a token of its own, as out of band. Once the peering stands the token is revoked if
    the enrolment left it (the provider knew the consumer's key already), so none outlives its use.
    """
    command = await peer_command(provider, valid_for=PEER_VALIDITY)
    progress(f"peering with {command.name} ({command.cluster_id})")
    asked = datetime.datetime.now(datetime.UTC)
    await peer_out_of_band(consumer, command, offer_policy=offer_policy)
    offer = await wait_established(consumer, command.cluster_id, timeout=timeout, progress=progress, since=asked)
    if command.enrolment is not None:
        with contextlib.suppress(enrolment.TokenError):
            await enrolment.revoke(provider, [command.enrolment.id])
    return offer


async def wait_established(
    client: KubeClient,
    peer_id: str,
    *,
    timeout: float = PEER_TIMEOUT,
    progress: Progress = lambda _: None,
    since: datetime.datetime | None = None,
) -> dict[str, Any]:
    """Wait until the outgoing peering with ``peer_id`` is Established; return the accepted offer.

    Fails at once on a refusal the manager learned at ``since`` or later (default: now), never on an older
    one still shown from a previous attempt.
    """
    asked = since or datetime.datetime.now(datetime.UTC)
    say = changes_only(progress)
    seen: dict[str, Any] = {"conditions": {}, "hint": ""}

    async def established() -> dict[str, Any] | None:
        conditions = seen["conditions"] = _conditions(await foreign_cluster(client, peer_id))
        outgoing = conditions.get(ConditionType.OUTGOING, {})
        if outgoing.get("status") == Status.ESTABLISHED:
            offer: dict[str, Any] = await client.get(
                RESOURCE_OFFERS, peer_id, namespace=names.tenant_namespace(peer_id)
            )
            return offer
        for kind, condition in conditions.items():
            if _final(kind, condition, asked=asked):
                raise PeeringError(f"peering refused: {kind} {condition['status']}: {condition.get('message', '')}")
        step = f"{outgoing.get('reason') or 'Waiting'}"
        hint = seen["hint"] = manual_decision_hint(peer_id) if step == OfferPhase.MANUAL_ACTION_REQUIRED else ""
        say(f"waiting: {step}" + (f"; {hint}" if hint else ""))
        return None

    try:
        return await poll_until(established, timeout=timeout, interval=0.05, message=f"the peering with {peer_id}")
    except WaitTimeout:
        detail = "; ".join(
            f"{k}={v.get('status')} ({v.get('reason')}: {v.get('message', '')})" for k, v in seen["conditions"].items()
        )
        raise PeeringError(
            f"the peering did not establish within {timeout:.0f}s: {detail or 'no status yet'}"
            + (f". {seen['hint']}" if seen["hint"] else "")
        ) from None


def manual_decision(peer_id: str, *, phase: str = OfferPhase.ACCEPTED, reason: str = "approved") -> list[str]:
    """The kubectl command (argv) that records an operator's verdict on ``peer_id``'s offer (Manual policy; pure)."""
    status = orjson.dumps({"status": {"phase": phase, "reason": reason}}).decode()
    namespace = names.tenant_namespace(peer_id)
    return [
        "kubectl",
        "patch",
        "resourceoffer",
        peer_id,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        status,
    ]


def manual_decision_hint(peer_id: str) -> str:
    """What ``liqoctl peer`` prints while an offer waits for an operator (pure)."""
    return f"to accept the offer: {shlex.join(manual_decision(peer_id))} (phase Refused to refuse it)"


async def unpeer(
    client: KubeClient,
    name: str,
    *,
    force: bool = False,
    timeout: float = UNPEER_TIMEOUT,
    progress: Progress = lambda _: None,
) -> None:
    """Reverse the peering ``name`` (a ForeignCluster name or cluster ID) and wait until it is gone.

    If the peer also consumes from us, only our direction is undone (``outgoingPeeringEnabled: No``) and
    the ForeignCluster stays for theirs; otherwise the ForeignCluster is deleted (its finalizer runs the
    teardown) and we wait for the tenant namespace to go. A peer that only consumes from us is revoked
    (:func:`revoke`), and stays refused until :func:`allow`.

    Raises:
        PeeringError: no such peer, or the teardown did not finish in time (then ``force`` finishes the
            local side: the provider is left to expire the identity and clean up when it can).
    """
    fc = await _find(client, name)
    peer_id = cluster_id(fc)
    namespace = names.tenant_namespace(peer_id)
    incoming = await client.get_or_none(RESOURCE_REQUESTS, peer_id, namespace=namespace) is not None
    if fc["spec"].get("outgoingPeeringEnabled") != "Yes":
        await revoke(client, fc, timeout=timeout, progress=progress)
        return
    progress(f"unpeering {fc['metadata']['name']} ({peer_id})" + (" (keeping its peering with us)" if incoming else ""))
    if incoming:
        await client.patch(FOREIGN_CLUSTERS, fc["metadata"]["name"], {"spec": {"outgoingPeeringEnabled": "No"}})
    else:
        await client.delete(FOREIGN_CLUSTERS, fc["metadata"]["name"], missing_ok=True)

    async def done() -> bool:
        if incoming:
            return (
                await client.get_or_none(SECRETS, names.IDENTITY_SECRET, namespace=namespace) is None
                and not (await client.list_all(VIRTUAL_NODES, namespace=namespace))[0]
            )
        # That very record gone: a peer still heard by discovery is known again at once, under the same name.
        record = await client.get_or_none(FOREIGN_CLUSTERS, fc["metadata"]["name"])
        if record is not None and record["metadata"].get("uid") == fc["metadata"].get("uid"):
            return False
        # A peer that enrolled as our consumer meanwhile keeps its tenant namespace, rightly: the teardown saw
        # its request and left the namespace to it.
        return not await _exists(client, NAMESPACES, namespace) or (
            await client.get_or_none(RESOURCE_REQUESTS, peer_id, namespace=namespace) is not None
        )

    try:
        await poll_until(done, timeout=timeout, message=f"the teardown of {fc['metadata']['name']} did not finish")
    except WaitTimeout as exc:
        if not force:
            raise PeeringError(
                f"{exc}: is the provider reachable, is the manager running (`liqoctl status`)? "
                f"`liqoctl unpeer {name} --force` finishes the local side"
            ) from exc
        progress("forcing the local side")
        await _force_local_teardown(client, fc, keep_namespace=incoming)


async def revoke(client: KubeClient, fc: dict[str, Any], *, timeout: float, progress: Progress) -> None:
    """Provider side: stop hosting a consumer that cannot (or will not) unpeer itself, and keep refusing it.

    Its ForeignCluster says ``incomingPeeringEnabled: No`` from now on: the manager releases everything the
    consumer had here (RBAC, twins, and its tenant namespace unless we consume from it), so its identity is
    worth nothing, and refuses its handshakes until the admin allows it again (:func:`allow`).
    """
    peer_id = cluster_id(fc)
    namespace = names.tenant_namespace(peer_id)
    progress(f"revoking {fc['metadata']['name']} ({peer_id}): it consumes from us, we do not consume from it")
    await client.patch(FOREIGN_CLUSTERS, fc["metadata"]["name"], {"spec": {"incomingPeeringEnabled": "No"}})

    async def gone() -> bool:
        return not await _exists(client, NAMESPACES, namespace)

    try:
        await poll_until(gone, timeout=timeout, message=f"tenant namespace {namespace} is still terminating")
    except WaitTimeout as exc:
        raise PeeringError(f"{exc}: kubectl describe namespace {namespace}") from exc
    progress(
        f"{fc['metadata']['name']} stays refused: `liqoctl allow {fc['metadata']['name']}` lets it peer again,"
        f" `kubectl delete foreigncluster {fc['metadata']['name']}` forgets it"
    )


async def allow(client: KubeClient, name: str, *, forget_key: bool = False) -> dict[str, Any]:
    """Provider side: let a revoked (or refused) consumer peer again; ``forget_key`` also unpins its key.

    Forgetting the key is for a consumer that really changed it (a re-installed cluster): it enrols again
    with a new peer command's token, and the first to do so for its cluster ID pins a new key.
    """
    fc = await _find(client, name)
    spec: dict[str, Any] = {"incomingPeeringEnabled": "Auto"}
    if forget_key:
        spec["keyFingerprint"] = None
    patched: dict[str, Any] = await client.patch(FOREIGN_CLUSTERS, fc["metadata"]["name"], {"spec": spec})
    return patched


async def _force_local_teardown(client: KubeClient, fc: dict[str, Any], *, keep_namespace: bool) -> None:
    peer_id = cluster_id(fc)
    namespace = names.tenant_namespace(peer_id)
    local_id = (await installed(client, role="local")).cluster_id
    ours = {VIRTUAL_NODES: None, RESOURCE_OFFERS: peer_id, RESOURCE_REQUESTS: local_id}  # None: every one
    for resource, only in ours.items():
        with contextlib.suppress(NotFoundError):
            items, _ = await client.list_all(resource, namespace=namespace)
            for item in items:
                if only is None or item["metadata"]["name"] == only:
                    await client.delete(resource, item["metadata"]["name"], namespace=namespace, missing_ok=True)
    for secret in (names.IDENTITY_SECRET, names.PEER_TOKEN_SECRET):
        await client.delete(SECRETS, secret, namespace=namespace, missing_ok=True)
    if keep_namespace:
        return
    with contextlib.suppress(NotFoundError):
        await client.patch(FOREIGN_CLUSTERS, fc["metadata"]["name"], {"metadata": {"finalizers": None}})
    await client.delete(NAMESPACES, namespace, missing_ok=True)


async def foreign_cluster(client: KubeClient, peer_id: str) -> dict[str, Any] | None:
    """The ForeignCluster with ``spec.clusterID == peer_id``, if any."""
    items, _ = await client.list_all(FOREIGN_CLUSTERS)
    return record_of(items, peer_id)


async def _find(client: KubeClient, name: str) -> dict[str, Any]:
    items, _ = await client.list_all(FOREIGN_CLUSTERS)
    if (found := named(items, name)) is not None:
        return found
    known = ", ".join(fc["metadata"]["name"] for fc in items) or "none"
    raise PeeringError(f"no peer named {name!r} (known: {known})")


async def _exists(client: KubeClient, resource: Any, name: str) -> bool:
    try:
        await client.get(resource, name)
    except NotFoundError:
        return False
    return True


def _conditions(fc: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((fc or {}).get("status") or {}).get("conditions") or []}


def _final(kind: str, condition: dict[str, Any], *, asked: datetime.datetime) -> bool:
    """Whether a condition says the peering will not establish unless someone acts (stop waiting at once).

    The provider refused us (a wrong token, a revocation, another key, a policy) or the answer was not from
    the provider — in a handshake tried at ``asked`` or later —, or the outgoing peering itself is denied.
    """
    status = condition.get("status")
    if kind == ConditionType.AUTHENTICATION:
        refused = status == Status.DENIED or condition.get("reason") == Reason.PROVIDER_NOT_AUTHENTICATED
        probed = condition.get("lastProbeTime")
        return refused and bool(probed) and parse_time(str(probed)) >= asked
    return kind == ConditionType.OUTGOING and status in (Status.ERROR, Status.DENIED)


def _now() -> str:
    return format_micro_time(datetime.datetime.now(datetime.UTC))


async def info(client: KubeClient) -> dict[str, Any]:
    """The local identity and every peer with its conditions, offered and accepted resources (no secrets)."""
    local = await installed(client, role="local")
    working_mode = await client.get_or_none(WORKING_MODES, WORKING_MODE)
    peers = []
    items, _ = await client.list_all(FOREIGN_CLUSTERS)
    for fc in items:
        peer_id = cluster_id(fc)
        namespace = names.tenant_namespace(peer_id)
        their_offer = await client.get_or_none(RESOURCE_OFFERS, peer_id, namespace=namespace)
        our_offer = await client.get_or_none(RESOURCE_OFFERS, local.cluster_id, namespace=namespace)
        conditions = _conditions(fc)
        outgoing = conditions.get(ConditionType.OUTGOING, {}).get("status") == Status.ESTABLISHED
        incoming = conditions.get(ConditionType.INCOMING, {}).get("status") == Status.ESTABLISHED
        role = {(True, True): "ConsumerAndProvider", (True, False): "Consumer", (False, True): "Provider"}.get(
            (outgoing, incoming), "None"
        )
        peers.append(
            {
                "name": fc["metadata"]["name"],
                "clusterID": peer_id,
                "clusterName": fc["spec"].get("clusterName", ""),
                "role": role,
                "conditions": {
                    k: {"status": v.get("status"), "reason": v.get("reason"), "message": v.get("message", "")}
                    for k, v in conditions.items()
                },
                "accepted": _resources(their_offer)
                if (their_offer or {}).get("status", {}).get("phase") == OfferPhase.ACCEPTED
                else {},
                "offered": _resources(our_offer),
                "identityExpiresAt": ((fc.get("status") or {}).get("identity") or {}).get("expiresAt"),
                "tethered": bool((fc.get("status") or {}).get("tethered")),
                "network": fc["spec"].get(NETWORK),
            }
        )
    return {
        "local": {
            "clusterID": local.cluster_id,
            "clusterName": local.cluster_name,
            "apiServerURL": local.api_server_url,
            "authURL": local.auth_url,
            "labels": local.cluster_labels,
            "network": local.network.to_message() if local.network else None,
            "workingMode": WorkingModeSpec.of(working_mode).mode.value,
            "tetheredTo": tethered_to(working_mode),
        },
        "peers": peers,
    }


def problems(report: dict[str, Any]) -> list[str]:
    """What is wrong, per peer and condition, from an :func:`info` report (for ``liqoctl status``)."""
    lines = []
    for peer in report["peers"]:
        for kind, condition in peer["conditions"].items():
            # A peer's network not known yet is learnt at its next handshake, and nothing waits for it: info
            # shows it; an overlap is an Error, listed like any other.
            if condition["status"] in (Status.ERROR, Status.DENIED) or (
                condition["status"] == Status.PENDING and kind != ConditionType.NETWORK
            ):
                where = f"{peer['name']}: {kind} is {condition['status']} ({condition['reason']})"
                lines.append(f"{where} {condition['message']}".rstrip())
    return lines


async def peer_kubeconfig(client: KubeClient, peer: str) -> dict[str, Any]:
    """The identity kubeconfig this cluster holds on provider ``peer`` (name or cluster ID)."""
    fc = await _find(client, peer)
    namespace = names.tenant_namespace(cluster_id(fc))
    try:
        secret = await client.get(SECRETS, names.IDENTITY_SECRET, namespace=namespace)
    except NotFoundError as exc:
        raise PeeringError(f"no identity on {peer} yet (see `liqoctl status`)") from exc
    return kubeconfig_of(secret)


def _resources(offer: dict[str, Any] | None) -> dict[str, str]:
    """An offer's resources and, as ``storage/<class>``, its storage: one map for a table's one column."""
    spec = (offer or {}).get("spec") or {}
    storage = {
        f"storage/{item.get('class')}": str(item.get("capacity"))
        for item in spec.get("storage") or ()
        if isinstance(item, dict)
    }
    return {k: str(v) for k, v in (spec.get("resources") or {}).items()} | storage
