"""What the listener announces from its flags (``--print``, a listener of its own: tools and tests)."""

from __future__ import annotations

import pytest

from liqo.apps.discovery import parse_args

ANNOUNCE = [
    "--address=172.30.0.9",
    "--print",
    "--cluster-id=6f1c2d3e-0a1b-4c5d-8e9f-0123456789ab",
    "--cluster-name=rome",
    "--auth-url=https://172.30.0.9:30443",
    "--key-fingerprint=sha256:" + "ab" * 32,
]


def test_the_flags_make_the_announcement_labels_included() -> None:
    announcement = parse_args([*ANNOUNCE, "--cluster-labels=tier=edge,region=eu"]).announcement
    assert announcement.labels == (("region", "eu"), ("tier", "edge"))
    assert parse_args(ANNOUNCE).announcement.labels == ()
    assert parse_args(["--address=172.30.0.9", "--print"]).announcement is None


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        ([*ANNOUNCE, "--cluster-labels=tier"], "the label 'tier' has no '='"),
        (["--address=172.30.0.9", "--print", "--cluster-labels=tier=edge"], "goes with what is announced"),
        ([*ANNOUNCE[:-1]], "go together"),
        ([*ANNOUNCE[:-2], "--auth-url=http://x", ANNOUNCE[-1]], "https://"),
    ],
)
def test_unusable_flags_are_refused(argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert complaint in capsys.readouterr().err
