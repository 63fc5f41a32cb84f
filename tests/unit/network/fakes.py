"""A :class:`~liqo.network.runner.Runner` for unit tests: records every command, answers from a script."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from liqo.network.runner import CommandError


@dataclass(frozen=True)
class Call:
    """One command run: its argv and its standard input."""

    argv: tuple[str, ...]
    input: str | None


@dataclass
class RecordingRunner:
    """Records calls; answers ``outputs[argv]`` (stdout, or a CommandError raised when ``check``), else ""."""

    outputs: Mapping[tuple[str, ...], str | CommandError] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)

    async def run(self, *argv: str, input: str | None = None, check: bool = True) -> str:
        self.calls.append(Call(argv=argv, input=input))
        output = self.outputs.get(argv, "")
        if isinstance(output, CommandError):
            if check:
                raise output
            return ""
        return output

    @property
    def argvs(self) -> list[list[str]]:
        """The argv of every call, in order."""
        return [list(call.argv) for call in self.calls]
