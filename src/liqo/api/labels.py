"""Kubernetes labels as a stranger may claim them: checked, encoded in one line, matched by a selector (pure).

A cluster's labels (``liqoctl install --cluster-labels``) travel in its announcements, and a DiscoverySource
allows or denies neighbours by them. What arrives is a claim like a name: checked against the API server's
own rules before it is held (so that the source's status, which the API server validates, never refuses a
whole table for one neighbour's label), and never more than a hint: anyone can announce any labels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

MAX_NAME = 63
MAX_PREFIX = 253
MAX_LABELS = 16
"""Labels one announcement may carry (a TXT string's 255 bytes hold fewer in practice)."""
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def label_problem(key: str, value: str) -> str:
    """Why ``key: value`` is no Kubernetes label; empty if it is one."""
    prefix, slash, name = key.rpartition("/")
    if slash and not (len(prefix) <= MAX_PREFIX and _PREFIX.fullmatch(prefix)):
        return f"the label key {key[:80]!r} has no DNS subdomain as its prefix"
    if not (len(name) <= MAX_NAME and _NAME.fullmatch(name)):
        return f"the label key {key[:80]!r} is not a label name (at most 63 letters, digits, '-', '_', '.')"
    if value and not (len(value) <= MAX_NAME and _NAME.fullmatch(value)):
        return f"the value of label {key[:80]!r} is not a label value (at most 63 letters, digits, '-', '_', '.')"
    return ""


def encode(labels: Mapping[str, str]) -> str:
    """``k=v,k=v`` in key order: neither a key nor a value can hold ``,`` or ``=``."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def decode(text: str) -> dict[str, str]:
    """The labels :func:`encode` wrote.

    Raises:
        ValueError: an entry is no ``key=value`` label, a key comes twice, or more than :data:`MAX_LABELS`.
    """
    labels: dict[str, str] = {}
    for entry in text.split(",") if text else ():
        key, equals, value = entry.partition("=")
        if not equals:
            raise ValueError(f"the label {entry[:80]!r} has no '='")
        if problem := label_problem(key, value):
            raise ValueError(problem)
        if key in labels:
            raise ValueError(f"the label key {key!r} comes twice")
        labels[key] = value
    if len(labels) > MAX_LABELS:
        raise ValueError(f"{len(labels)} labels, more than {MAX_LABELS}")
    return labels


def selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether ``labels`` hold every pair of ``selector`` (a ``matchLabels``; an empty one selects nothing)."""
    return bool(selector) and all(labels.get(key) == value for key, value in selector.items())
