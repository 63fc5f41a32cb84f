"""The offer's words: a ResourceOffer's phase and a ResourceRequest's offer state.

The phase is the consumer's verdict, the state the provider's answer; spelt once here for the CRD schemas
and for every controller that reads or writes them.
"""

from __future__ import annotations

from enum import StrEnum


class OfferPhase(StrEnum):
    """A ResourceOffer's ``status.phase``: what its consumer decided."""

    PENDING = "Pending"
    ACCEPTED = "Accepted"
    REFUSED = "Refused"
    MANUAL_ACTION_REQUIRED = "ManualActionRequired"


class OfferState(StrEnum):
    """A ResourceRequest's ``status.offerState``: whether its provider made an offer."""

    NONE = "None"
    CREATED = "Created"
    DENIED = "Denied"
