"""The provider's side of enrolment: minting, finding, using up and collecting tokens; the caps on tenants.

Every token is a Secret of its own in ``liqo`` (:mod:`liqo.peering.tokens` says what it holds and why). The
authentication endpoint reads one by name for an enrolment and nothing else; it uses it up by deleting it
with its UID as a precondition before anything is created for the consumer, so of two enrolments racing
with one token exactly one gets past the delete, and re-creates it if that enrolment then fails (the
consumer may retry; nothing was made for it).

Even with a token, an enrolment is refused while this cluster holds as many consumers as it takes
(:class:`TenantLimits`): *tenants* are the consumers enrolled here (the RoleBinding ``liqo-peer`` of the
ClusterRole ``liqo-peer-tenant`` in their tenant namespace, which the manager alone writes), *pending* ones
those of them without an accepted offer of ours. Pending tenants cost a namespace, RBAC and a record each and
bring nothing; a token holder's enrolments must not be able to crowd out the consumers that do share. Over
a cap the answer says which, and nothing is created or used up. The counts are read from the endpoint's own
caches of those bindings and offers (:class:`~liqo.peering.authcaches.AuthCaches`), only once a request
has proven a valid, unexpired token; an enrolment's answer waits until they show it, so the next one this
replica judges counts it.

The collector (:class:`TokenCollector`, run by the leader) deletes tokens once expired; the endpoint refuses
them whether collected yet or not.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from liqo.api import names
from liqo.api.peerings import offer_accepted
from liqo.kube.cache import SharedInformers
from liqo.kube.client import KubeClient
from liqo.kube.component import Component
from liqo.kube.controller import Controller, Result
from liqo.kube.errors import ConflictError, NotFoundError
from liqo.kube.resources import SECRETS
from liqo.peering.authcaches import AuthCaches
from liqo.peering.incoming import ABANDONED_AFTER
from liqo.peering.tokens import (
    ENROLMENT_TOKEN,
    EnrolmentToken,
    enrolment_key,
    new_token,
    parse_token,
    secret_name,
    token_id,
    token_secret,
)

log = logging.getLogger(__name__)

DEFAULT_MAX_TENANTS = 100
DEFAULT_MAX_PENDING_TENANTS = 10
TOKEN_SELECTOR = f"{ENROLMENT_TOKEN}=true"
_MINT_ATTEMPTS = 3


class TokenError(Exception):
    """A token operation cannot be done as asked (an unknown ID); the message says which."""


# -- tokens ------------------------------------------------------------------------------------------------


async def mint(client: KubeClient, *, valid_for: datetime.timedelta) -> tuple[str, EnrolmentToken]:
    """A new token, recorded on the provider behind ``client`` for ``valid_for``: ``(token, its record)``."""
    for _ in range(_MINT_ATTEMPTS):
        token = new_token()
        expires_at = datetime.datetime.now(datetime.UTC) + valid_for
        try:
            created = await client.create(
                SECRETS, token_secret(fingerprint=enrolment_key(token).fingerprint, expires_at=expires_at)
            )
        except ConflictError:
            continue  # another token of the same ID (1 in 2^64): draw again
        recorded = parse_token(created)
        assert recorded is not None  # the Secret token_secret forges is one
        return token, recorded
    raise TokenError("could not record a new enrolment token (its name kept being taken)")


async def outstanding(client: KubeClient) -> list[EnrolmentToken]:
    """Every token recorded on the provider behind ``client``, the soonest to expire first."""
    secrets, _ = await client.list_all(SECRETS, namespace=names.LIQO_NAMESPACE, label_selector=TOKEN_SELECTOR)
    found = [token for token in map(parse_token, secrets) if token is not None]
    return sorted(found, key=lambda token: (token.expires_at, token.id))


async def revoke(client: KubeClient, ids: Iterable[str]) -> list[str]:
    """Delete the tokens ``ids``: the commands carrying them enrol no one from now on; the IDs revoked.

    Raises:
        TokenError: no token has one of the IDs (those before it are revoked).
    """
    revoked = []
    for token in ids:
        try:
            await client.delete(SECRETS, secret_name(token), namespace=names.LIQO_NAMESPACE)
        except NotFoundError:
            raise TokenError(f"no enrolment token {token!r} (used, expired, or never minted here)") from None
        revoked.append(token)
    return revoked


# -- caps ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TenantLimits:
    """How many consumers this cluster takes: enrolled in all, and enrolled without an accepted offer."""

    max_tenants: int = DEFAULT_MAX_TENANTS
    max_pending: int = DEFAULT_MAX_PENDING_TENANTS

    def __post_init__(self) -> None:
        if self.max_tenants < 0 or self.max_pending < 0:
            raise ValueError("tenant limits must be 0 (no new consumer) or more")


@dataclass(frozen=True)
class Occupancy:
    """Who is enrolled here, and who of them has accepted an offer of ours."""

    tenants: frozenset[str]
    accepted: frozenset[str]

    @property
    def pending(self) -> frozenset[str]:
        """Enrolled, no accepted offer."""
        return self.tenants - self.accepted


def occupancy(*, bindings: Iterable[dict[str, Any]], offers: Iterable[dict[str, Any]], local_id: str) -> Occupancy:
    """Who is enrolled and who accepted, from RoleBindings and ResourceOffers anywhere in the cluster (pure).

    A consumer is enrolled while the binding of its tenant role stands in its own tenant namespace (twins'
    bindings have the same name, elsewhere). An offer counts when it is ours (named after ``local_id``), in
    an enrolled consumer's tenant namespace, and accepted (:func:`~liqo.api.peerings.offer_accepted`).
    """

    def consumer(obj: dict[str, Any]) -> str | None:
        found = names.tenant_peer(obj)
        return found[0] if found else None

    tenants = frozenset(
        peer
        for binding in bindings
        if binding["metadata"].get("name") == names.PEER_BINDING
        and (binding.get("roleRef") or {}).get("name") == names.PEER_TENANT_ROLE
        and (peer := consumer(binding))
    )
    accepted = frozenset(
        peer
        for offer in offers
        if offer["metadata"].get("name") == local_id and offer_accepted(offer) and (peer := consumer(offer)) in tenants
    )
    return Occupancy(tenants=tenants, accepted=accepted)


@dataclass(frozen=True)
class Refusal:
    """An enrolment refused before anything is done: the HTTP status and the reason the consumer is told."""

    status: int
    reason: str


def cap_refusal(occupancy: Occupancy, limits: TenantLimits) -> Refusal | None:
    """Why a new consumer cannot enrol now, or None (pure).

    Pending first: that one clears by itself (a consumer accepts, or is released after
    :data:`~liqo.peering.incoming.ABANDONED_AFTER` without a request), so it is a 429 to retry; the total
    only clears when the admin (or a consumer leaving) makes room, a 403.
    """
    pending = len(occupancy.pending)
    if pending >= limits.max_pending:
        return Refusal(
            429,
            f"this cluster has {pending} consumer(s) enrolled that have not accepted an offer yet, the most it"
            f" takes ({limits.max_pending}): retry once one of them has accepted or left (one that never asks for"
            f" resources is released within {int(ABANDONED_AFTER.total_seconds() // 60)} minutes)",
        )
    if len(occupancy.tenants) >= limits.max_tenants:
        return Refusal(
            403,
            f"this cluster has {len(occupancy.tenants)} consumers enrolled, the most it takes"
            f" ({limits.max_tenants}): its admin must make room (or raise manager.maxTenants)",
        )
    return None


# -- what the endpoint uses --------------------------------------------------------------------------------


class KubeEnrolments:
    """The endpoint's tokens, on the provider's API server (``client``: the manager's), and caps, on ``caches``."""

    def __init__(self, *, client: KubeClient, caches: AuthCaches, limits: TenantLimits) -> None:
        self._client = client
        self._caches = caches
        self._limits = limits

    async def find(self, fingerprint: str) -> EnrolmentToken | None:
        """The token whose key has ``fingerprint`` as its Secret records it; None if there is none (one read)."""
        name = secret_name(token_id(fingerprint))
        secret = await self._client.get_or_none(SECRETS, name, namespace=names.LIQO_NAMESPACE)
        return None if secret is None else parse_token(secret)

    async def refusal(self) -> Refusal | None:
        """Why no new consumer may enrol now (a cap reached), or None: from the caches, no API call."""
        bindings, offers = self._caches.bindings_and_offers()
        return cap_refusal(occupancy(bindings=bindings, offers=offers, local_id=self._caches.local_id), self._limits)

    async def consume(self, token: EnrolmentToken) -> bool:
        """Use ``token`` up (delete its Secret, that very one); False if another enrolment did first."""
        try:
            await self._client.delete(SECRETS, secret_name(token.id), namespace=names.LIQO_NAMESPACE, uid=token.uid)
        except (NotFoundError, ConflictError):
            return False
        return True

    async def restore(self, token: EnrolmentToken) -> None:
        """Record ``token`` again, as it was: the enrolment that used it up created nothing."""
        with contextlib.suppress(ConflictError):
            await self._client.create(SECRETS, token_secret(fingerprint=token.fingerprint, expires_at=token.expires_at))

    async def settle(self, consumer_id: str, *, key_fingerprint: str) -> None:
        """Return once the caches count ``consumer_id`` as enrolled with that key, or after a bound (logged)."""
        if not await self._caches.settled(consumer_id, key_fingerprint=key_fingerprint):
            log.warning(
                "the caches of the authentication endpoint do not show the enrolment of %s yet: the next"
                " enrolments may be counted without it",
                consumer_id,
            )


# -- collection --------------------------------------------------------------------------------------------


class TokenCollector(Component):
    """Deletes enrolment tokens once they expire (those used are deleted by their enrolment)."""

    def __init__(self, *, client: KubeClient, informers: SharedInformers) -> None:
        self._client = client
        self.tokens = informers.informer(SECRETS, namespace=names.LIQO_NAMESPACE, label_selector=TOKEN_SELECTOR)
        self.controller: Controller[str] = Controller(name="enrolment-tokens", reconcile=self.reconcile)
        self.controller.watch(self.tokens, lambda secret: [secret["metadata"]["name"]])

    @property
    def controllers(self) -> list[Controller[Any]]:
        """The control loop."""
        return [self.controller]

    async def reconcile(self, name: str) -> Result | None:
        """Delete the token ``name`` if it expired; else look again when it does."""
        token = parse_token(self.tokens.store.get(f"{names.LIQO_NAMESPACE}/{name}"))
        if token is None:
            return None  # gone, or not a token liqo wrote: it enrols no one either way
        now = datetime.datetime.now(datetime.UTC)
        if not token.expired(now):
            return Result(requeue_after=max(1.0, (token.expires_at - now).total_seconds()))
        log.info("enrolment token %s expired at %s: deleting it", token.id, token.expires_at)
        with contextlib.suppress(NotFoundError, ConflictError):
            await self._client.delete(SECRETS, name, namespace=names.LIQO_NAMESPACE, uid=token.uid)
        return None
