"""The `agentfsm` command line.

Each subcommand lives in its own module with an `add_parser(subparsers)` that declares its
arguments and sets its handler; `main` parses and dispatches.

Exit status: 0 done; 1 a check failed (an illegal log, stale diagrams); 2 the command could
not do its job: bad arguments, unreadable input, a line that is not an event, a missing
tool. Failures print one line to stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from agentfsm.cli import check_table, control, diagram, inspect_run, replay, schema, validate
from agentfsm.cli._common import PROG, Handler, Parser, UsageError
from agentfsm.fsm.errors import AgentFSMError

__all__ = ["UsageError", "build_parser", "main"]

_SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[Parser]], None], ...] = (
    validate.add_parser,
    replay.add_parser,
    inspect_run.add_parser,
    diagram.add_parser,
    schema.add_parser,
    check_table.add_parser,
    control.add_parsers,
)


def build_parser() -> argparse.ArgumentParser:
    """The `agentfsm` argument parser with every subcommand registered."""
    parser = Parser(
        prog=PROG,
        description="agentfsm: a strictly validated lifecycle for AI-agent runs.",
    )
    subparsers = parser.add_subparsers(
        title="commands", dest="command", required=True, metavar="COMMAND"
    )
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 check failed, 2 unusable).

    Args:
        argv: the arguments after the program name (default: `sys.argv[1:]`).
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _fail(f"{exc} (see `{exc.prog} --help`)")
    except SystemExit as exc:  # --help and --version print, then exit 0 through argparse
        return exc.code if isinstance(exc.code, int) else 0
    handler: Handler = args.handler
    try:
        return handler(args)
    except UsageError as exc:
        return _fail(str(exc))
    except (AgentFSMError, OSError) as exc:
        return _fail(f"{PROG} {args.command}: error: {exc}")


def _fail(message: str) -> int:
    # One line, whatever the error's own layout (InvalidTableError lists problems on lines).
    print(" ".join(message.split()), file=sys.stderr)
    return 2
