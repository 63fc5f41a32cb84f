r"""Text a peer chose, made safe to show: unprintable characters refused where they enter, escaped where they leave.

Why: peers name things here (a cluster name in a handshake, strings in the resources they write), and those
names end up in log lines and Events, which people read in terminals and collectors split on newlines. A name
holding ``"\n2026-01-01 INFO ..."`` writes a log line of its own, ``"\x1b[2J"`` clears the terminal of whoever
reads it, U+202E shows what follows backwards. So:

- where a peer's string enters (the handshake's shape check, the CRD schemas: :data:`PATTERN`), a name that
  holds any :func:`unprintable` character is refused, saying which (:func:`describe`);
- where text leaves for people (every log line's message, every Event's message), it goes through
  :func:`printable`, which escapes each such character as Python writes it (``\n``, ``\x1b``, ``\u202e``)
  and bounds the length: what a stranger wrote is shown, never obeyed.

Unprintable means a control character (Cc: C0, DEL, C1), a format character (Cf: bidirectional overrides,
zero-width characters), a surrogate (Cs), a private-use character (Co), a line or paragraph separator (Zl,
Zp). Everything else, letters of any script and spaces included, is printable and passes unchanged.
"""

from __future__ import annotations

import unicodedata

UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
"""The Unicode general categories of the characters that are never shown as they are."""

PATTERN = r"^[^\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Zl}\p{Zp}]*$"
"""A CRD schema's ``pattern`` (Go's regexp, which the API server uses) refusing every unprintable character."""

ELLIPSIS = "…"
"""Ends a text :func:`printable` cut short."""

_KINDS = {
    "Cc": "a control character",
    "Cf": "a format character",
    "Cs": "a surrogate",
    "Co": "a private-use character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}


def unprintable(text: str) -> str | None:
    """The first unprintable character of ``text``, or None (pure)."""
    if text.isprintable():  # the usual case, at C speed (it is stricter: non-ASCII spaces go the long way)
        return None
    return next((char for char in text if unicodedata.category(char) in UNPRINTABLE), None)


def describe(char: str) -> str:
    """``U+000A, a control character``: an unprintable character named for a refusal (pure)."""
    return f"U+{ord(char):04X}, {_KINDS.get(unicodedata.category(char), 'an unprintable character')}"


def printable(text: str, *, limit: int | None = None) -> str:
    """``text`` with every unprintable character escaped, at most ``limit`` characters (pure).

    A text cut short ends in :data:`ELLIPSIS`. Printable text within the limit comes back unchanged.
    """
    if unprintable(text) is not None:
        text = "".join(ascii(char)[1:-1] if unicodedata.category(char) in UNPRINTABLE else char for char in text)
    if limit is not None and len(text) > limit:
        text = text[: limit - len(ELLIPSIS)] + ELLIPSIS if limit >= len(ELLIPSIS) else ""
    return text
