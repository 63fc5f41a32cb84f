"""What a cluster announces about itself (DNS-SD TXT records), and what a listener makes of what it hears (pure).

One record set serves both discovery sources: on the LAN a cluster sends it by multicast DNS, in a DNS zone
its operator publishes it (``liqoctl generate dns-records``). Service ``_liqo._tcp``; the instance is the
cluster ID, so one cluster is one instance whichever address it is heard from; the TXT record carries:

``txtvers=1``, ``id`` (the cluster ID), ``name`` (its name, a hint), ``fp`` (the fingerprint of its cluster
key), ``auth`` (its authentication endpoint, an ``https://`` URL), and ``labels`` (its cluster labels,
``k=v,k=v``, a hint like the name: announced only when they fit one TXT string).

Whoever can send a packet on the LAN, or write the zone, can announce anything: an announcement is a
stranger's claim. :func:`parse` keeps only well-formed ones, every field checked as the handshake checks it,
each value bounded (a TXT string is at most 255 bytes). It never trusts what it heard: the fingerprint is
what the consumer will demand that the provider prove in the handshake, nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from liqo.api import labels
from liqo.api.crds.schema import CLUSTER_UUID_PATTERN, KEY_FINGERPRINT_PATTERN
from liqo.api.identity import ClusterIdentity
from liqo.kube.printable import describe, printable, unprintable

SERVICE_TYPE = "_liqo._tcp"
"""The DNS-SD service every liqo cluster announces."""
TXT_VERSION = "1"
MAX_TXT_STRING = 255
"""Bytes in one ``key=value`` string of a TXT record (RFC 6763, 6.1)."""
MAX_TXT_STRINGS = 16
"""Strings a record may carry before it is refused whole (ours has five or six)."""

_CLUSTER_ID = re.compile(CLUSTER_UUID_PATTERN)
_FINGERPRINT = re.compile(KEY_FINGERPRINT_PATTERN)
_INSTANCE_KEY = re.compile(r"^[0-9a-f]{12}$")


class Unusable(ValueError):
    """What was heard is no announcement of a liqo cluster; the message says why (never echoing raw bytes)."""


@dataclass(frozen=True)
class Announcement:
    """A cluster as it describes itself: who (ID, name), where (authentication endpoint), and its key."""

    cluster_id: str
    cluster_name: str
    auth_url: str
    key_fingerprint: str
    labels: tuple[tuple[str, str], ...] = ()
    """Its cluster labels, by key (a tuple: an announcement is compared and hashed)."""

    @classmethod
    def of(cls, identity: ClusterIdentity) -> Announcement:
        """What a cluster of this identity announces."""
        return cls(
            cluster_id=identity.cluster_id,
            cluster_name=identity.cluster_name,
            auth_url=identity.auth_url,
            key_fingerprint=identity.key_fingerprint,
            labels=tuple(sorted(identity.cluster_labels.items())),
        )

    def txt(self) -> dict[str, str]:
        """The TXT record's strings, ``name`` cut to fit a TXT string (it is only a hint), the labels if they fit."""
        room = MAX_TXT_STRING - len(b"name=")
        name = self.cluster_name.encode()[:room].decode(errors="ignore")
        strings = {
            "txtvers": TXT_VERSION,
            "id": self.cluster_id,
            "name": name,
            "fp": self.key_fingerprint,
            "auth": self.auth_url,
        }
        encoded = labels.encode(dict(self.labels))
        if encoded and len(encoded.encode()) <= MAX_TXT_STRING - len(b"labels="):
            strings["labels"] = encoded
        return strings

    @property
    def instance(self) -> str:
        """The DNS-SD instance: ``<cluster ID>-<12 hex of the key fingerprint>``.

        One per claim, so that an impostor claiming a cluster's ID with another key is heard beside it, not in
        its place.
        """
        return f"{self.cluster_id}-{key_prefix(self.key_fingerprint)}"

    def claims(self) -> tuple[str, str]:
        """The cluster ID and ``sha256:<prefix>`` its instance name stands for."""
        return self.cluster_id, f"sha256:{key_prefix(self.key_fingerprint)}"


def key_prefix(fingerprint: str) -> str:
    """The 12 hex digits of a key fingerprint an instance name carries."""
    return fingerprint.removeprefix("sha256:")[:12]


def claim_of_instance(instance: str) -> tuple[str, str] | None:
    """The cluster ID and ``sha256:<prefix>`` an instance label stands for; None if it cannot be one of ours (pure).

    Only a cluster ID and 12 lowercase hex digits pass: every announcement has such a name, and nothing else
    heard (control characters, any script, the longest label) goes any further than this.
    """
    cluster_id, dash, prefix = instance.rpartition("-")
    if not dash or not _CLUSTER_ID.match(cluster_id) or not _INSTANCE_KEY.match(prefix):
        return None
    return cluster_id, f"sha256:{prefix}"


def parse(properties: Mapping[bytes, bytes | None]) -> Announcement:
    """The announcement a TXT record carries.

    Raises:
        Unusable: a missing, malformed or oversized field, an unknown version; the first one found.
    """
    if len(properties) > MAX_TXT_STRINGS:
        raise Unusable(f"{len(properties)} TXT strings, more than {MAX_TXT_STRINGS}")
    fields: dict[str, str] = {}
    for raw_key, raw_value in properties.items():
        if len(raw_key) + len(raw_value or b"") + 1 > MAX_TXT_STRING:
            raise Unusable("a TXT string longer than 255 bytes")
        try:
            fields[raw_key.decode("ascii").lower()] = (raw_value or b"").decode()
        except UnicodeDecodeError:
            raise Unusable("a TXT string that is not UTF-8 text") from None
    if fields.get("txtvers") != TXT_VERSION:
        raise Unusable(f"txtvers is {_shown(fields.get('txtvers'))}, not {TXT_VERSION}")
    cluster_id = fields.get("id", "")
    if not _CLUSTER_ID.fullmatch(cluster_id):
        raise Unusable(f"id {_shown(cluster_id)} is not a cluster ID (the lowercase UUID of its kube-system)")
    name = fields.get("name", "")
    if not name:
        raise Unusable("no name")
    if (char := unprintable(name)) is not None:
        raise Unusable(f"the name holds {describe(char)}")
    fingerprint = fields.get("fp", "")
    if not _FINGERPRINT.fullmatch(fingerprint):
        raise Unusable(f"fp {_shown(fingerprint)} is not a key fingerprint (sha256:<64 hex digits>)")
    try:
        claimed = labels.decode(fields.get("labels", ""))
    except ValueError as exc:
        raise Unusable(f"labels: {exc}") from None
    return Announcement(
        cluster_id=cluster_id,
        cluster_name=name,
        auth_url=check_auth_url(fields.get("auth", "")),
        key_fingerprint=fingerprint,
        labels=tuple(sorted(claimed.items())),
    )


def check_auth_url(url: str) -> str:
    """``url`` if it can be an authentication endpoint: ``https://host[:port][/path]``, printable, no credentials.

    Raises:
        Unusable: any other.
    """
    if unprintable(url) is not None or not url.startswith("https://"):
        raise Unusable(f"auth {_shown(url)} is not an https:// URL")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a malformed port raises here)
    except ValueError:
        raise Unusable(f"auth {_shown(url)} is not a URL") from None
    if not parts.hostname or parts.username is not None or parts.query or parts.fragment:
        raise Unusable(f"auth {_shown(url)} must be https://host[:port][/path]")
    return url


def _shown(value: str | None) -> str:
    return "missing" if value is None else repr(printable(value, limit=80))
