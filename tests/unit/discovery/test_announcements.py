"""An announcement is a stranger's claim: only well-formed ones pass, and nothing heard crashes the listener."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liqo.discovery.announcements import MAX_TXT_STRING, Announcement, Unusable, claim_of_instance, parse
from liqo.kube.printable import unprintable

ROME = Announcement(
    cluster_id="6f1c2d3e-0a1b-4c5d-8e9f-0123456789ab",
    cluster_name="rome",
    auth_url="https://172.30.1.2:30443",
    key_fingerprint="sha256:" + "ab" * 32,
)


def _wire(txt: dict[str, str]) -> dict[bytes, bytes | None]:
    return {key.encode(): value.encode() for key, value in txt.items()}


def test_what_a_cluster_announces_is_what_a_listener_reads() -> None:
    assert parse(_wire(ROME.txt())) == ROME
    assert ROME.instance == f"{ROME.cluster_id}-{ROME.key_fingerprint[7:19]}"
    assert claim_of_instance(ROME.instance) == ROME.claims()


@given(st.text(min_size=1, max_size=300).filter(lambda name: unprintable(name) is None))
def test_a_long_name_is_cut_to_fit_one_txt_string_and_still_reads(name: str) -> None:
    announced = Announcement(ROME.cluster_id, name, ROME.auth_url, ROME.key_fingerprint)
    wire = _wire(announced.txt())
    assert all(len(key) + len(value or b"") + 1 <= MAX_TXT_STRING for key, value in wire.items())
    heard = parse(wire)
    assert name.startswith(heard.cluster_name)


def test_cluster_labels_travel_with_the_announcement_when_they_fit_one_txt_string() -> None:
    labelled = dataclasses.replace(ROME, labels=(("region", "eu"), ("tier", "edge")))
    assert labelled.txt()["labels"] == "region=eu,tier=edge"
    assert parse(_wire(labelled.txt())) == labelled
    crowded = dataclasses.replace(ROME, labels=tuple((f"label-{i:02}", "v" * 40) for i in range(16)))
    assert "labels" not in crowded.txt()  # rather none than some: a deny list must not see half of them
    assert parse(_wire(crowded.txt())).labels == ()


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"labels": "tier"}, "labels: the label 'tier' has no '='"),
        ({"labels": "tier=edge\n"}, "labels: the value of label 'tier'"),
        ({"id": "rome"}, "id 'rome' is not a cluster ID"),
        ({"id": ROME.cluster_id.upper()}, "is not a cluster ID"),
        ({"name": ""}, "no name"),
        ({"name": "evil\n2026 INFO forged"}, "the name holds U+000A, a control character"),
        ({"fp": "sha256:xyz"}, "fp 'sha256:xyz' is not a key fingerprint"),
        ({"auth": "http://172.30.1.2:30443"}, "is not an https:// URL"),
        ({"auth": "https://user:pw@host:443"}, "must be https://host[:port][/path]"),
        ({"auth": "https://host:99999"}, "is not a URL"),
        ({"auth": "https://\x1b[2J:1"}, "is not an https:// URL"),
    ],
)
def test_a_malformed_field_is_refused_naming_it(change: dict[str, str], why: str) -> None:
    with pytest.raises(Unusable) as refused:
        parse(_wire(ROME.txt() | change))
    assert why in str(refused.value)
    assert unprintable(str(refused.value)) is None


def test_oversized_and_undecodable_records_are_refused() -> None:
    with pytest.raises(Unusable, match="longer than 255 bytes"):
        parse(_wire(ROME.txt() | {"auth": "https://h/" + "a" * 300}))
    with pytest.raises(Unusable, match="more than 16"):
        parse(_wire(ROME.txt() | {f"x{i}": "" for i in range(20)}))
    with pytest.raises(Unusable, match="not UTF-8"):
        parse(_wire(ROME.txt()) | {b"name": b"\xff\xfe"})


@given(st.dictionaries(st.binary(max_size=300), st.one_of(st.none(), st.binary(max_size=300)), max_size=24))
def test_whatever_is_heard_is_an_announcement_or_a_printable_refusal(properties: dict[bytes, bytes | None]) -> None:
    why = ""
    try:
        parse(properties)
    except Unusable as refused:
        why = str(refused)
    assert unprintable(why) is None
    assert len(why) < 300


@given(st.text(min_size=12, max_size=12))
def test_only_a_cluster_id_and_twelve_lowercase_hex_digits_name_a_claim(key: str) -> None:
    claim = claim_of_instance(f"{ROME.cluster_id}-{key}")
    assert (claim is not None) == all(c in "0123456789abcdef" for c in key)
    assert claim is None or claim == (ROME.cluster_id, f"sha256:{key}")


@pytest.mark.parametrize("instance", ["rome-abababababab", f"{ROME.cluster_id.upper()}-abababababab", "0", "-", ""])
def test_an_instance_named_otherwise_is_no_claim(instance: str) -> None:
    assert claim_of_instance(instance) is None
    assert claim_of_instance(f"{instance}\x15") is None
