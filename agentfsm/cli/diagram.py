"""`agentfsm diagram`: draw a table, or a recorded run's path on it; keep diagrams/ fresh."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, load_tables, only_table
from agentfsm.cli._files import replacing
from agentfsm.cli._io import LineCounter, stream_lines
from agentfsm.cli._log_table import table_of_log
from agentfsm.cli._output import shown
from agentfsm.cli.report import write_report
from agentfsm.diagrams import (
    DiagramFormat,
    DiagramOptions,
    check_diagrams,
    render_diagram,
    render_diagram_png,
    trajectory_from_jsonl,
    write_diagrams,
)
from agentfsm.diagrams.files import DIAGRAM_SUFFIXES
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable

__all__ = ["add_parser"]

_PNG = "png"
_HTML = "html"


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm diagram`."""
    p = subparsers.add_parser(
        "diagram",
        help="draw a transition table (and a recorded run on it)",
        epilog=(
            "examples:\n"
            "  agentfsm diagram --format svg -o agent_run.svg\n"
            "  agentfsm diagram --run events.jsonl --run-id run_123 --format png -o run.png\n"
            "  agentfsm diagram --check --dir diagrams"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Draw a transition table as Mermaid, Graphviz DOT, SVG, PNG, PlantUML or Markdown; "
            "optionally with a recorded run's path on top. --check and --write keep the "
            "committed diagrams of a directory in step with the table."
        ),
    )
    formats = [f.value for f in DiagramFormat] + [_PNG, _HTML]
    p.add_argument(
        "--format",
        choices=formats,
        help="output format (default: mermaid); svg, png and html need Graphviz `dot`; html is "
        "the self-contained review file of `agentfsm report` (needs the ui extra)",
    )
    p.add_argument("--output", "-o", type=_args.path, help="write here instead of standard output")
    p.add_argument(
        "--table",
        metavar="MODULE:ATTR",
        action="append",
        help="the table to draw, e.g. `myapp.lifecycle:TABLE` (default: agentfsm's own); with "
        "--run, several versions (repeatable, or a list): the one the run names is drawn",
    )
    p.add_argument(
        "--run",
        metavar="EVENTS.jsonl",
        type=_args.path,
        help="draw this recorded run's path on top (- reads standard input)",
    )
    p.add_argument(
        "--run-id", type=_args.run_id, help="the run to draw, when the log holds several"
    )
    p.add_argument(
        "--expand",
        action="store_true",
        help="draw moves that leave every active state one by one, not from 'any active state'",
    )
    p.add_argument(
        "--direction",
        choices=["LR", "TB"],
        help="LR: left to right, wide (default); TB: top to bottom, tall, for slides and pages",
    )
    p.add_argument(
        "--no-descriptions",
        action="store_true",
        help="leave the states' descriptions out of the boxes (svg, png, dot)",
    )
    p.add_argument(
        "--dpi",
        type=int,
        help="resolution of a png (Graphviz's default is 96; 48 halves the picture's size)",
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
        type=_args.path,
        default=Path("diagrams"),
        help="the directory of committed diagrams (default: diagrams)",
    )
    p.set_defaults(handler=_diagram)


def _diagram(args: argparse.Namespace) -> int:
    versions = load_tables(args.table, "diagram")
    # Several versions are chosen between by a recorded run; drawing a table takes one.
    table = only_table(versions, "diagram") if args.run is None or len(versions) < 2 else None
    if args.check or args.write:
        given = [
            flag
            for flag, value in (
                ("--format", args.format),
                ("--output", args.output),
                ("--run", args.run),
                ("--run-id", args.run_id),
                ("--expand", args.expand),
                ("--direction", args.direction),
                ("--no-descriptions", args.no_descriptions),
                ("--dpi", args.dpi),
            )
            if value
        ]
        if given:
            mode = "--check" if args.check else "--write"
            raise UsageError(
                f"{PROG} diagram: {mode} covers every committed format; drop {', '.join(given)}"
            )
        drawn = table or DEFAULT_TABLE
        if args.check:
            return _check(args.dir, drawn, args.table[0] if args.table else None)
        return _write(args.dir, drawn)
    if args.run_id is not None and args.run is None:
        raise UsageError(f"{PROG} diagram: --run-id needs --run EVENTS.jsonl")

    if args.format == _HTML:
        run_ids = [args.run_id] if args.run_id is not None else []
        shown_table = only_table(versions, "diagram") or DEFAULT_TABLE
        write_report(shown_table, args.run, run_ids, args.output, "diagram")
        return 0
    trajectory = None
    if args.run is not None:
        counter = LineCounter("diagram")
        lines = counter.count(stream_lines(args.run, "diagram", quiet=True))
        if len(versions) > 1:
            table, lines = table_of_log(lines, "diagram", versions, args.run_id)
        with counter.checking():
            trajectory = trajectory_from_jsonl(lines, table or DEFAULT_TABLE, run_id=args.run_id)
    table = table or DEFAULT_TABLE
    fmt = args.format or DiagramFormat.MERMAID.value
    options = _options(args)
    if fmt == _PNG:
        data = render_diagram_png(
            table, trajectory=trajectory, collapse=not args.expand, options=options
        )
    else:
        text = render_diagram(
            table, fmt, trajectory=trajectory, collapse=not args.expand, options=options
        )
        if args.output is None:
            sys.stdout.write(text)
            return 0
        data = text.encode("utf-8")
    if args.output is None:
        sys.stdout.flush()  # text written before must not come after the bytes
        sys.stdout.buffer.write(data)
    else:
        with replacing(args.output, "diagram") as handle:
            handle.write(data)
    return 0


def _options(args: argparse.Namespace) -> DiagramOptions:
    try:
        return DiagramOptions(
            direction=args.direction or "LR",
            descriptions=not args.no_descriptions,
            dpi=args.dpi,
        )
    except ValueError as exc:
        raise UsageError(f"{PROG} diagram: {exc}") from None


def _check(directory: Path, table: TransitionTable, spec: str | None) -> int:
    stale = check_diagrams(directory, table)
    if not stale:
        count = len(DIAGRAM_SUFFIXES)
        print(
            f"{PROG} diagram --check: the {count} diagrams of '{shown(table.name)}' in {directory}/"
            " match the table"
        )
        return 0
    for item in stale:
        print(f"{PROG} diagram --check: {shown(str(item))}", file=sys.stderr)
    # The hint must name the table checked: without --table it would write agentfsm's own
    # diagrams into the user's directory.
    table_flag = f" --table {shown(spec)}" if spec else ""
    print(
        f"{PROG} diagram --check: regenerate with "
        f"`{PROG} diagram --write --dir {directory}{table_flag}`",
        file=sys.stderr,
    )
    return 1


def _write(directory: Path, table: TransitionTable) -> int:
    for path in write_diagrams(directory, table):
        print(f"wrote {path}")
    return 0
