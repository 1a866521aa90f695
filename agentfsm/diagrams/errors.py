"""Errors of the diagram tools.

::

    AgentFSMError
    └── DiagramError
        ├── ToolMissingError (RuntimeError)     an external renderer (Graphviz `dot`) is absent
        ├── RenderError (RuntimeError)          the external renderer refused the input
        └── RunNotInLogError (ValueError)       the log has no such run, or several to choose from

The text formats (Mermaid, DOT, PlantUML, Markdown) never raise these: they need no tool.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentfsm.errors import AgentFSMError, quote_list

__all__ = ["DiagramError", "RenderError", "RunNotInLogError", "ToolMissingError"]


class DiagramError(AgentFSMError):
    """The base of the diagram tools' errors."""


class ToolMissingError(DiagramError, RuntimeError):
    """An external program a format needs is not installed.

    Attributes:
        tool: the program's name, e.g. `dot`.
        install: the command that installs it, e.g. `apt-get install graphviz`.
    """

    def __init__(self, tool: str, install: str, needed_for: str) -> None:
        self.tool = tool
        self.install = install
        super().__init__(
            f"'{tool}' is not installed (needed for {needed_for}); install it with `{install}`"
        )


class RenderError(DiagramError, RuntimeError):
    """An external renderer failed on the input.

    Attributes:
        tool: the program's name.
        returncode: its exit status.
        stderr: what it printed on standard error.
    """

    def __init__(self, tool: str, returncode: int, stderr: str) -> None:
        self.tool = tool
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"'{tool}' failed with exit status {returncode}: {stderr.strip()}")


class RunNotInLogError(DiagramError, ValueError):
    """A log given to draw a run holds no such run, or several when none was named.

    Attributes:
        run_id: the run asked for, or None when none was named.
        available: the runs the log holds, in order of first appearance (the message
            names the first ten).
    """

    def __init__(self, run_id: str | None, available: Sequence[str]) -> None:
        self.run_id = run_id
        self.available: tuple[str, ...] = tuple(available)
        if run_id is not None:
            msg = f"the log has no run '{run_id}'; it has: {_some(self.available)}"
        elif not self.available:
            msg = "the log has no events"
        else:
            msg = (
                f"the log holds {len(self.available):,} runs ({_some(self.available)}); "
                "name one with a run id"
            )
        super().__init__(msg)


#: Runs a message names at most: a log may hold a million.
_NAMED = 10


def _some(names: Sequence[str]) -> str:
    """`'a', 'b'`, or the first `_NAMED` and how many more."""
    if len(names) <= _NAMED:
        return quote_list(names)
    return f"{quote_list(names[:_NAMED])}, and {len(names) - _NAMED:,} more"
