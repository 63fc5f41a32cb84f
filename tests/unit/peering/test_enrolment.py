"""Enrolment tokens and the caps on tenants, as pure functions: what a token's Secret holds, when it enrols, who counts.

The Kubernetes side (one read by name, a delete with the UID as precondition, the collector) runs on a real
cluster in tests/integration/test_enrolment.py.
"""

from __future__ import annotations

import base64
import copy
import datetime
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.api import names
from liqo.peering.enrolment import Occupancy, TenantLimits, cap_refusal, occupancy
from liqo.peering.tokens import (
    MAX_VALIDITY,
    UNKNOWN_TOKEN,
    enrolment_key,
    new_token,
    parse_token,
    parse_validity,
    token_refusal,
    token_secret,
)

LOCAL = "0f7e9b3a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
NOW = datetime.datetime(2026, 3, 1, 12, 0, tzinfo=datetime.UTC)
CONSUMERS = [f"{n:08x}-0000-4000-8000-000000000000" for n in range(8)]


def stored(secret: dict[str, Any], *, uid: str = "uid-1") -> dict[str, Any]:
    """``secret`` as the API server returns it: ``stringData`` as base64 ``data``, a UID and a creation time."""
    data = {k: base64.b64encode(v.encode()).decode() for k, v in secret["stringData"].items()}
    meta = secret["metadata"] | {"uid": uid, "creationTimestamp": "2026-03-01T11:00:00Z"}
    return {k: v for k, v in secret.items() if k != "stringData"} | {"data": data, "metadata": meta}


# -- tokens ------------------------------------------------------------------------------------------------


@given(token=st.builds(new_token), hours=st.integers(min_value=-48, max_value=48))
def test_a_tokens_secret_holds_its_keys_fingerprint_and_expiry_never_the_token(token: str, hours: int) -> None:
    fingerprint = enrolment_key(token).fingerprint
    expires = NOW + datetime.timedelta(hours=hours)
    secret = token_secret(fingerprint=fingerprint, expires_at=expires)
    assert token not in str(secret)
    assert secret["metadata"]["namespace"] == names.LIQO_NAMESPACE
    recorded = parse_token(stored(secret))
    assert recorded is not None
    assert (recorded.fingerprint, recorded.expires_at, recorded.uid) == (fingerprint, expires, "uid-1")
    assert secret["metadata"]["name"] == f"liqo-enrolment-{recorded.id}"
    assert fingerprint.removeprefix("sha256:").startswith(recorded.id)
    assert token_refusal(recorded, fingerprint=fingerprint, now=NOW) == (
        None
        if hours > 0
        else f"the enrolment token expired at {expires:%Y-%m-%dT%H:%M:%SZ}: ask the provider's"
        " admin for a new `liqoctl generate peer-command`"
    )


def test_a_token_enrols_only_with_its_own_key_and_never_when_gone() -> None:
    fingerprint = enrolment_key("mine").fingerprint
    recorded = parse_token(stored(token_secret(fingerprint=fingerprint, expires_at=NOW + MAX_VALIDITY)))
    assert recorded is not None
    assert token_refusal(recorded, fingerprint=enrolment_key("another").fingerprint, now=NOW) == UNKNOWN_TOKEN
    assert token_refusal(None, fingerprint=fingerprint, now=NOW) == UNKNOWN_TOKEN
    assert "already used, revoked, or never minted" in UNKNOWN_TOKEN


def _retyped(secret: dict[str, Any]) -> None:
    secret["type"] = "Opaque"


def _garbled(secret: dict[str, Any]) -> None:
    secret["data"]["keyFingerprint"] = "not base64!"


def _other_hash(secret: dict[str, Any]) -> None:
    secret["data"]["keyFingerprint"] = base64.b64encode(b"md5:abc").decode()


def _renamed(secret: dict[str, Any]) -> None:
    secret["metadata"]["name"] = "liqo-enrolment-0000000000000000"  # another token's name: not this one


def _no_expiry(secret: dict[str, Any]) -> None:
    secret["metadata"]["annotations"][names.EXPIRES_AT] = "soon"


@pytest.mark.parametrize("change", [_retyped, _garbled, _other_hash, _renamed, _no_expiry])
def test_a_secret_of_another_shape_is_no_token(change: Callable[[dict[str, Any]], None]) -> None:
    """Written by liqo in its own namespace, but edited by hand into another shape: it enrols no one."""
    secret = copy.deepcopy(stored(token_secret(fingerprint=enrolment_key("t").fingerprint, expires_at=NOW)))
    assert parse_token(secret) is not None
    change(secret)
    assert parse_token(secret) is None


@pytest.mark.parametrize(
    ("text", "validity"),
    [
        ("30m", datetime.timedelta(minutes=30)),
        ("24h", datetime.timedelta(hours=24)),
        (" 7d ", datetime.timedelta(days=7)),
    ],
)
def test_validities_are_read_as_operators_write_them(text: str, validity: datetime.timedelta) -> None:
    assert parse_validity(text) == validity


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("0h", "is not a duration"),
        ("-1h", "is not a duration"),
        ("1w", "is not a duration"),
        ("1.5h", "is not a duration"),
        ("²h", "is not a duration"),
        ("31d", "longer than 30 days"),
        ("9999999h", "longer than 30 days"),
    ],
)
def test_a_validity_that_is_not_one_or_too_long_is_refused(text: str, complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        parse_validity(text)


# -- caps --------------------------------------------------------------------------------------------------


def binding(consumer: str, *, namespace: str | None = None, role: str = names.PEER_TENANT_ROLE) -> dict[str, Any]:
    return {
        "metadata": {"name": names.PEER_BINDING, "namespace": namespace or names.tenant_namespace(consumer)},
        "roleRef": {"name": role},
    }


def offer(consumer: str, *, phase: str = "Accepted", name: str = LOCAL, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": names.tenant_namespace(consumer)}
    if deleting:
        meta["deletionTimestamp"] = "2026-03-01T12:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_who_is_enrolled_and_who_accepted() -> None:
    a, b, c, d = CONSUMERS[:4]
    seen = occupancy(
        bindings=[
            binding(a),
            binding(b),
            binding(c),
            binding(d, namespace="demo-1234"),  # a twin's binding: not an enrolment
            binding(d, role=names.PEER_TWIN_ROLE),  # not the tenant role
        ],
        offers=[
            offer(a),
            offer(b, phase="Pending"),
            offer(c, deleting=True),
            offer(c, name=CONSUMERS[5]),  # the consumer's own offer to us (bidirectional): not ours
            offer(d),  # not enrolled
        ],
        local_id=LOCAL,
    )
    assert seen == Occupancy(tenants=frozenset({a, b, c}), accepted=frozenset({a}))
    assert seen.pending == frozenset({b, c})


occupancies = st.builds(
    lambda tenants, accepted: Occupancy(tenants=frozenset(tenants), accepted=frozenset(accepted) & frozenset(tenants)),
    st.sets(st.sampled_from(CONSUMERS)),
    st.sets(st.sampled_from(CONSUMERS)),
)
limits = st.builds(TenantLimits, st.integers(0, 10), st.integers(0, 10))


@given(seen=occupancies, caps=limits)
def test_a_new_consumer_enrols_only_below_both_caps(seen: Occupancy, caps: TenantLimits) -> None:
    refusal = cap_refusal(seen, caps)
    pending, total = len(seen.pending), len(seen.tenants)
    if pending >= caps.max_pending:
        assert refusal is not None
        assert refusal.status == 429
        assert f"{pending} consumer(s) enrolled that have not accepted an offer yet" in refusal.reason
        assert f"({caps.max_pending})" in refusal.reason
    elif total >= caps.max_tenants:
        assert refusal is not None
        assert refusal.status == 403
        assert f"{total} consumers enrolled, the most it takes ({caps.max_tenants})" in refusal.reason
    else:
        assert refusal is None


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError, match=r"0 \(no new consumer\) or more"):
        TenantLimits(max_tenants=-1)
