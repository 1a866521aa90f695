"""The `agentfsm` command line.

Each subcommand is one `_add_<name>` function that declares its arguments on the shared
subparsers and sets its handler; `main` parses and dispatches. A new subcommand is a new pair
of functions and one entry in `_SUBCOMMANDS`.

Exit status: 0 done; 1 a check failed (e.g. stale diagrams); 2 the command could not do its
job: bad arguments, unreadable input, a missing tool. Failures print one line to stderr,
never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from agentfsm.diagrams import (
    DIAGRAM_SUFFIXES,
    DiagramFormat,
    check_diagrams,
    render_diagram,
    render_diagram_png,
    trajectory_from_jsonl,
    write_diagrams,
)
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.errors import AgentFSMError
from agentfsm.fsm.table import TransitionTable

__all__ = ["UsageError", "main"]

_PROG = "agentfsm"


class UsageError(Exception):
    """The command line cannot be carried out; the message is printed as one line (exit 2).

    Attributes:
        prog: the (sub)command whose `--help` explains the usage.
    """

    def __init__(self, message: str, prog: str = _PROG) -> None:
        self.prog = prog
        super().__init__(message)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", self.prog)


Handler = Callable[[argparse.Namespace], int]


# -- agentfsm diagram ---------------------------------------------------------------------

_PNG = "png"


def _add_diagram(subparsers: argparse._SubParsersAction[_Parser]) -> None:
    p = subparsers.add_parser(
        "diagram",
        help="draw a transition table (and a recorded run on it)",
        description=(
            "Draw a transition table as Mermaid, Graphviz DOT, SVG, PNG, PlantUML or Markdown; "
            "optionally with a recorded run's path on top. --check and --write keep the "
            "committed diagrams of a directory in step with the table."
        ),
    )
    formats = [f.value for f in DiagramFormat] + [_PNG]
    p.add_argument(
        "--format",
        choices=formats,
        help="output format (default: mermaid); svg and png need Graphviz `dot`",
    )
    p.add_argument("--output", "-o", type=Path, help="write here instead of standard output")
    p.add_argument(
        "--table",
        metavar="MODULE:ATTR",
        help="the table to draw, e.g. `myapp.lifecycle:TABLE` (default: agentfsm's own)",
    )
    p.add_argument(
        "--run",
        metavar="EVENTS.jsonl",
        type=Path,
        help="draw this recorded run's path on top (- reads standard input)",
    )
    p.add_argument("--run-id", help="the run to draw, when the log holds several")
    p.add_argument(
        "--expand",
        action="store_true",
        help="draw moves that leave every active state one by one, not from 'any active state'",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--check",
        action="store_true",
        help="compare the committed diagrams in --dir with the table; exit 1 if any is stale",
    )
    mode.add_argument(
        "--write",
        "--update",
        action="store_true",
        help="regenerate the committed diagrams in --dir (needs Graphviz `dot`)",
    )
    p.add_argument(
        "--dir",
        type=Path,
        default=Path("diagrams"),
        help="the directory of committed diagrams (default: diagrams)",
    )
    p.set_defaults(handler=_diagram)


def _diagram(args: argparse.Namespace) -> int:
    table = _load_table(args.table) if args.table else DEFAULT_TABLE
    if args.check or args.write:
        given = [
            flag
            for flag, value in (
                ("--format", args.format),
                ("--output", args.output),
                ("--run", args.run),
                ("--run-id", args.run_id),
                ("--expand", args.expand),
            )
            if value
        ]
        if given:
            mode = "--check" if args.check else "--write"
            raise UsageError(
                f"{_PROG} diagram: {mode} covers every committed format; drop {', '.join(given)}"
            )
        return _check(args.dir, table) if args.check else _write(args.dir, table)
    if args.run_id is not None and args.run is None:
        raise UsageError(f"{_PROG} diagram: --run-id needs --run EVENTS.jsonl")

    trajectory = None
    if args.run is not None:
        lines = _read_lines(args.run)
        trajectory = trajectory_from_jsonl(lines, table, run_id=args.run_id)
    fmt = args.format or DiagramFormat.MERMAID.value
    if fmt == _PNG:
        png = render_diagram_png(table, trajectory=trajectory, collapse=not args.expand)
        _emit_bytes(png, args.output)
    else:
        text = render_diagram(table, fmt, trajectory=trajectory, collapse=not args.expand)
        _emit_text(text, args.output)
    return 0


def _check(directory: Path, table: TransitionTable) -> int:
    stale = check_diagrams(directory, table)
    if not stale:
        count = len(DIAGRAM_SUFFIXES)
        print(
            f"{_PROG} diagram --check: the {count} diagrams of '{table.name}' in {directory}/"
            " match the table"
        )
        return 0
    for item in stale:
        print(f"{_PROG} diagram --check: {item}", file=sys.stderr)
    print(
        f"{_PROG} diagram --check: regenerate with `{_PROG} diagram --write --dir {directory}`",
        file=sys.stderr,
    )
    return 1


def _write(directory: Path, table: TransitionTable) -> int:
    for path in write_diagrams(directory, table):
        print(f"wrote {path}")
    return 0


def _load_table(spec: str) -> TransitionTable:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{_PROG} diagram: --table wants MODULE:ATTR, got '{spec}'")
    # Like other tools that import the user's code (uvicorn, gunicorn): the current
    # directory is importable, as it is under `python -m`.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is reported alike
        raise UsageError(
            f"{_PROG} diagram: cannot import '{module_name}': {type(exc).__name__}: {exc}"
        ) from None
    try:
        table = getattr(module, attr)
    except AttributeError:
        raise UsageError(
            f"{_PROG} diagram: module '{module_name}' has no attribute '{attr}'"
        ) from None
    if not isinstance(table, TransitionTable):
        raise UsageError(
            f"{_PROG} diagram: '{spec}' is a {type(table).__name__}, not a TransitionTable"
        )
    return table


def _read_lines(path: Path) -> list[str]:
    if str(path) == "-":
        return sys.stdin.read().splitlines()
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UsageError(f"{_PROG} diagram: cannot read '{path}': {exc.strerror}") from None


def _emit_text(text: str, output: Path | None) -> None:
    if output is None:
        sys.stdout.write(text)
    else:
        output.write_text(text, encoding="utf-8")


def _emit_bytes(data: bytes, output: Path | None) -> None:
    if output is None:
        sys.stdout.buffer.write(data)
    else:
        output.write_bytes(data)


# -- the parser and the entry point -------------------------------------------------------

_SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[_Parser]], None], ...] = (_add_diagram,)


def build_parser() -> argparse.ArgumentParser:
    """The `agentfsm` argument parser with every subcommand registered."""
    parser = _Parser(
        prog=_PROG,
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
        return _fail(f"{_PROG} {args.command}: error: {exc}")


def _fail(message: str) -> int:
    # One line, whatever the error's own layout (InvalidTableError lists problems on lines).
    print(" ".join(message.split()), file=sys.stderr)
    return 2
