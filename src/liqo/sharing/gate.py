"""The sharing policy's say in authentication: a peer a SharingPolicy denies gets no identity at all.

:class:`PolicyGate` is a :class:`~liqo.api.provisioner.Provisioner` wrapped around another one (peering's
:class:`~liqo.peering.provisioning.KubeProvisioner`): the authentication endpoint calls it after it has
authenticated the consumer and before anything is created, so a denied peer leaves no tenant namespace, RBAC
or certificate behind. It belongs to sharing because the decision is the SharingPolicy's
(:func:`~liqo.sharing.policy.select_policy`), and it sees peering only through the contract in
:mod:`liqo.api.provisioner`, since capabilities do not import one another; the manager chains the two.

The consumer is judged by the cluster ID the endpoint authenticated, never by the name it claims. Policies
are read from a cache the endpoint runs (every replica runs its own), never listed per request: a request
must not cost the API server in proportion to the cluster. The manager passes the cache's reader in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from liqo.api.provisioner import AuthenticatedConsumer, Issued, PeerDenied, PeerRecord, Provisioner
from liqo.sharing.policy import select_policy

PolicyReader = Callable[[], Sequence[Mapping[str, Any]]]
"""The SharingPolicies as last seen (an informer's ``store.list``)."""


class PolicyGate:
    """Refuses identities to peers a SharingPolicy denies; hands every other one to ``provisioner``."""

    def __init__(self, *, policies: PolicyReader, provisioner: Provisioner) -> None:
        self._policies = policies
        self._provisioner = provisioner

    async def record(self, consumer_id: str) -> PeerRecord | None:
        """The provisioner's record of ``consumer_id``."""
        return await self._provisioner.record(consumer_id)

    async def provision(self, consumer: AuthenticatedConsumer) -> Issued:
        """Provision ``consumer`` unless a policy denies it.

        Raises:
            PeerDenied: the policy applying to ``consumer.consumer_id`` denies it; or the provisioner refuses it.
            ProvisioningError: the provisioner failed.
        """
        if select_policy(self._policies(), peer_id=consumer.consumer_id).action == "Deny":
            raise PeerDenied("this cluster's sharing policy denies peering with you")
        return await self._provisioner.provision(consumer)
