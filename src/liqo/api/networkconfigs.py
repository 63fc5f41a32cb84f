"""The NetworkConfig's words: its tunnel's connection state and reasons, as the gateway writes them.

The gateway's connection check (``network.tunnelcheck``) decides them; the ForeignCluster's ``NetworkStatus``
(``peering.status``) and ``liqoctl test network`` read them, and the CRD lists the states.
"""

from __future__ import annotations

from enum import StrEnum


class ConnectionState(StrEnum):
    """Whether probes through the tunnel are answered."""

    CONNECTING = "Connecting"
    CONNECTED = "Connected"
    ERROR = "Error"


class ConnectionReason(StrEnum):
    """Why, in one word."""

    NOT_CONFIGURED = "NotConfigured"
    WAITING_FOR_ANSWER = "WaitingForAnswer"
    NEVER_ANSWERED = "NeverAnswered"
    PROBES_ANSWERED = "ProbesAnswered"
    PROBES_LOST = "ProbesLost"
