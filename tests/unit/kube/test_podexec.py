"""The exit code of a command run through pods/exec, from the final status (pure)."""

from __future__ import annotations

from liqo.kube.podexec import exit_code


def test_exit_codes_from_the_status_channel() -> None:
    assert exit_code({"status": "Success"}) == 0
    failure = {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
    }
    assert exit_code(failure) == 3
    assert exit_code({"status": "Failure", "message": "executable file not found"}) is None
    assert exit_code({"status": "Failure", "details": {"causes": [{"reason": "ExitCode", "message": "x"}]}}) is None
