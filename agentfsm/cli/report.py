"""`agentfsm report`: one self-contained HTML file for a design review (see agentfsm.ui.report)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, load_table
from agentfsm.cli._files import replacing
from agentfsm.cli._io import LineCounter, stream_lines
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable

__all__ = ["add_parser", "write_report"]


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm report`."""
    p = subparsers.add_parser(
        "report",
        help="write one self-contained HTML file for a design review",
        description="Write one HTML file, with nothing to fetch, that opens anywhere: the "
        "table's diagram with clickable states, the transitions with conditions and guards, "
        "the static check, and the recorded runs of LOG to step through (where a log broke "
        "the lifecycle, with what was allowed). Needs the ui extra and Graphviz for the picture.",
        epilog="examples:\n  agentfsm report -o review.html\n"
        "  agentfsm report runs.jsonl --run-id run_123 -o review.html "
        "--table myapp.lifecycle:TABLE",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("log", nargs="?", type=_args.path, metavar="LOG.jsonl",
                   help="recorded runs to step through (- reads standard input)")  # fmt: skip
    p.add_argument("--output", "-o", type=_args.path, help="write here instead of standard output")
    p.add_argument(
        "--table", metavar="MODULE:ATTR", action="append",
        help="the table (default: agentfsm's own); one table",
    )  # fmt: skip
    p.add_argument("--run-id", action="append", default=[], type=_args.run_id,
                   help="only this run of the log (repeatable)")  # fmt: skip
    p.add_argument("--title", type=_args.text, help="the page's title")
    p.set_defaults(handler=_report)


def _report(args: argparse.Namespace) -> int:
    table = load_table(args.table, "report") or DEFAULT_TABLE
    write_report(table, args.log, args.run_id, args.output, "report", title=args.title)
    return 0


def write_report(
    table: TransitionTable,
    log: Path | None,
    run_ids: list[str],
    output: Path | None,
    command: str,
    *,
    title: str | None = None,
) -> None:
    """Render the review file and write it to `output` (a path) or standard output."""
    try:
        from agentfsm.ui.report import render_report
    except ImportError as exc:
        raise UsageError(
            f"{PROG} {command}: the report needs `pip install 'agentfsm[ui]'` "
            f"({exc.name} is missing)"
        ) from None
    if run_ids and log is None:
        raise UsageError(f"{PROG} {command}: --run-id needs a log")
    lines = None
    counter = LineCounter(command)
    if log is not None:
        lines = counter.count(stream_lines(log, command, quiet=True))
    with counter.checking():
        html = render_report(table, lines, run_ids=run_ids, title=title)
    if output is None:
        sys.stdout.write(html)
        return
    with replacing(output, command) as handle:
        handle.write(html.encode("utf-8"))
