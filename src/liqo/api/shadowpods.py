"""The ShadowPod's words: the phases and reasons a provider writes in its status, and a consumer reads.

A consumer's virtual kubelet shows them on the home pod (``virtualkubelet.forge.pods.held_back``) and the
CRD's schema lists the phases (``api.crds``): one spelling for the three, so that neither side can drift.
"""

from __future__ import annotations

from enum import StrEnum


class ShadowPodPhase(StrEnum):
    """What the provider did with a ShadowPod (no phase: its pod was made and nothing went wrong)."""

    CREATED = "Created"
    REFUSED = "Refused"
    WAITING = "Waiting"


class ShadowPodReason(StrEnum):
    """Why a ShadowPod waits or was refused, in one word."""

    OVER_BUDGET = "OverBudget"
    """It waits: its pod would take its consumer beyond the accepted offer."""
    NO_ACCEPTED_OFFER = "NoAcceptedOffer"
    """It waits: its consumer has no accepted offer from this provider (none, withdrawn, denied)."""
    CLAIM_MISSING = "ClaimMissing"
    """It waits: a PersistentVolumeClaim its pod uses is not in its namespace (yet)."""
    POD_REFUSED = "PodRefused"
    """Refused: the provider's admission (or the API server) refused the pod it stands for."""
    UNREADABLE_RESOURCES = "UnreadableResources"
    """Refused: its pod's resource requests cannot be read as quantities, so no budget can count them."""


WAIT_REASONS = (ShadowPodReason.OVER_BUDGET, ShadowPodReason.NO_ACCEPTED_OFFER, ShadowPodReason.CLAIM_MISSING)
"""The reasons a consumer shows as they are on its home pod: its own budget's, not the provider's verdict."""
