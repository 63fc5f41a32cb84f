"""The offloading's words: a twin's phase, and a NamespaceOffloading's phase as a whole.

A twin's phase is reported by the provider (its NamespaceMap's status) and repeated at home per provider (the
NamespaceOffloading's conditions); spelt once here for the CRD schemas, both sides' controllers and liqoctl.
"""

from __future__ import annotations

from enum import StrEnum


class TwinPhase(StrEnum):
    """One twin namespace's state, as the provider reports it and home repeats it per provider."""

    PENDING = "Pending"
    READY = "Ready"
    CONFLICT = "Conflict"
    """The provider refused it (a reserved or taken name, its admission): only a change of the ask helps."""
    ERROR = "Error"
    """Something failed on the way (unreachable, a failed write): retried."""


FAILED = frozenset({TwinPhase.CONFLICT, TwinPhase.ERROR})


class OffloadingPhase(StrEnum):
    """A NamespaceOffloading's ``status.offloadingPhase``: its twins' phases summed up."""

    READY = "Ready"
    NO_CLUSTER_SELECTED = "NoClusterSelected"
    IN_PROGRESS = "InProgress"
    SOME_FAILED = "SomeFailed"
    ALL_FAILED = "AllFailed"
    TERMINATING = "Terminating"
