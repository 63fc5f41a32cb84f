"""The command `liqoctl peer` prints while an offer waits for an operator (Manual offer policy)."""

from __future__ import annotations

import json
import shlex

from liqo.api import names
from liqo.peering.operations import manual_decision, manual_decision_hint


def test_the_hint_is_a_command_a_shell_runs_as_is() -> None:
    hint = manual_decision_hint("milan-id")
    printed = hint.removeprefix("to accept the offer: ").removesuffix(" (phase Refused to refuse it)")
    assert shlex.split(printed) == manual_decision("milan-id")


def test_the_command_patches_the_status_of_the_offer_copy_in_the_tenant_namespace() -> None:
    argv = manual_decision("milan-id", phase="Refused", reason="too expensive")
    assert argv[:4] == ["kubectl", "patch", "resourceoffer", "milan-id"]
    assert argv[argv.index("-n") + 1] == names.tenant_namespace("milan-id")
    assert "--subresource=status" in argv
    assert json.loads(argv[argv.index("-p") + 1]) == {"status": {"phase": "Refused", "reason": "too expensive"}}
