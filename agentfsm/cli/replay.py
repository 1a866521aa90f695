"""`agentfsm replay`: fold a log, or a store's runs, and print the run records.

With `--store` the runs are read from the store (every one, in run id order, or `--run-id`),
each row checked as a load checks it (in a keyed store, its link too): a stored event that
does not check out is exit 1 naming its run and sequence, and nothing is printed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, load_tables
from agentfsm.cli._io import LineCounter, Style
from agentfsm.cli._log_table import table_of_log
from agentfsm.cli._output import error_text, print_json, shown, shown_json, why
from agentfsm.cli._store import add_store_argument, opened_store, run_ids
from agentfsm.cli.validate import add_allow_empty, add_log_arguments, read_log
from agentfsm.errors import CorruptLogError, RunNotFoundError
from agentfsm.events.codec import dump_event
from agentfsm.fsm.registry import known_tables
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.reducers.validate import ValidationReport
from agentfsm.stores._load import close_iterator
from agentfsm.stores.base import EventStore

__all__ = ["add_parser", "summary"]

_EXAMPLE = """\
examples:
  agentfsm replay events.jsonl
  agentfsm replay events.jsonl --run-id run_123 --format json
  agentfsm replay --store runs.db --run-id run_123
"""


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm replay`."""
    p = subparsers.add_parser(
        "replay",
        help="fold a log and print each run's record",
        description=(
            "Fold a JSON Lines log (or, with --store, a store's runs) through the table and "
            "print the run records: JSON is a list of records (the action ledger keyed by "
            "action_id); text is a summary."
        ),
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_log_arguments(p, optional=True)
    add_store_argument(p, table=False)
    p.add_argument("--run-id", type=_args.run_id, help="only this run")
    add_allow_empty(p)
    p.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace) -> int:
    if args.store is not None:
        if args.file is not None:
            raise UsageError(f"{PROG} replay: give FILE or --store, not both")
        try:
            report, reducer = _from_store(args)
        except CorruptLogError as exc:  # a stored event that does not check out: exit 1
            print(f"{PROG} replay: error: {error_text(exc)}", file=sys.stderr)
            return 1
    elif args.file is None:
        raise UsageError(f"{PROG} replay: give FILE (- reads stdin) or --store")
    else:
        report, reducer = read_log(args, "replay", keep_records=True)
    if not report.ok:
        finding = report.findings[0]
        print(f"{PROG} replay: cannot fold the log: {shown(finding.message)}", file=sys.stderr)
        return report.exit_code
    records = [report.records[r.run_id] for r in report.runs]
    if args.format == "json":
        print_json(lambda: [r.to_json() for r in records], "replay")
    else:
        style = Style(sys.stdout)
        ended = reducer.table.terminal_states
        print("\n\n".join(summary(r, style, r.status in ended) for r in records))
    return 0


def _from_store(args: argparse.Namespace) -> tuple[ValidationReport, Reducer]:
    """Fold the store's runs (or `--run-id`) as `replay` folds a file: the same lines, read
    from the store, checked as they are read (with the one table `--table` gives, or the one
    the first run names among the versions it gives, as for a file)."""
    given = load_tables(args.table, "replay")
    table = given[0] if len(given) == 1 else None
    with opened_store(args.store, "replay", table, [*given, *known_tables()]) as store:
        if args.run_id is not None:
            try:
                store.run_info(args.run_id)
            except RunNotFoundError as exc:
                raise UsageError(f"{PROG} replay: {exc}") from None
        counter = LineCounter("replay")
        lines = counter.count(_lines(store, args.run_id))
        if table is None:
            found, lines = table_of_log(lines, "replay", given, args.run_id)
        else:
            found = table
        log = (lines, Reducer(found, tables=given), counter)
        return read_log(args, "replay", log=log, keep_records=True)


def _lines(store: EventStore, run_id: str | None) -> Iterator[str]:
    for one in run_ids(store, run_id):
        events = store.events(one)
        try:
            for event in events:
                yield dump_event(event)
        finally:
            close_iterator(events)


def _short(value: Any, width: int = 70) -> str:
    text = shown(value) if isinstance(value, str) else _json_or_why(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _json_or_why(value: Any) -> str:
    try:
        return shown_json(value)
    except (ValueError, RecursionError) as exc:  # a summary shows the value, or why not
        return f"({why(exc)})"


def summary(record: RunRecord, style: Style | None = None, ended: bool = False) -> str:
    """A person's view of a record: status (`ended`: in a terminal state of its table),
    stop reason, turns, usage, what the lifecycle's own events recorded, each action."""
    s = style or Style(sys.stdout)
    u = record.usage
    lines = [
        f"run {shown(record.run_id)}: {s.status(shown(record.status), ended)} "
        f"(version {record.version}, {record.turn} turn{'s' if record.turn != 1 else ''})",
    ]
    if record.stop_reason:
        lines.append(
            f"  stopped: {shown(record.stop_reason)}"
            + (f": {shown(record.stop_detail)}" if record.stop_detail else "")
        )
    if record.error is not None:
        lines.append(f"  error: {shown(record.error.kind)}: {shown(record.error.message)}")
    if record.cancel_reason or record.cancel_requested_by:
        reason, by = record.cancel_reason or "-", record.cancel_requested_by or "-"
        lines.append(f"  cancel: {shown(reason)} (by {shown(by)})")
    if record.pause_reason:
        lines.append(f"  paused: {shown(record.pause_reason)}")
    if record.current_agent:
        lines.append(f"  agent: {shown(record.current_agent)}")
    lines.append(
        f"  usage: {u.input_tokens:,} input + {u.output_tokens:,} output tokens, cost {u.cost:.6g}"
    )
    if record.final_output is not None:
        lines.append(f"  final output: {_short(record.final_output)}")
    if record.pending_approvals:
        lines.append(f"  waiting for approval: {', '.join(map(shown, record.pending_approvals))}")
    if record.custom:
        # What the lifecycle's own events recorded (`CustomEvent.fold`): a key a line.
        lines.append("  custom:")
        lines += [f"    {shown(key)}: {_short(value)}" for key, value in record.custom.items()]
    if record.actions:
        lines.append("  actions:")
        ids = {a: shown(a) for a in record.actions}
        tools = {a: shown(action.tool) for a, action in record.actions.items()}
        idw = max(map(len, ids.values()))
        tw = max(map(len, tools.values()))
        for key, a in record.actions.items():
            tries = f"{a.attempts} attempt{'s' if a.attempts != 1 else ''}"
            extra = f"  {shown(a.reason)}" if a.reason else ""
            if a.error is not None:
                extra = f"  {shown(a.error.kind)}: {shown(a.error.message)}"
            lines.append(
                f"    {ids[key]:<{idw}}  {tools[key]:<{tw}}  {a.status:<16} {tries}{extra}"
            )
    return "\n".join(lines)
