"""`agentfsm replay`: fold a log and print the run records."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser
from agentfsm.cli._io import Style
from agentfsm.cli._output import print_json, shown, shown_json, why
from agentfsm.cli.validate import add_allow_empty, add_log_arguments, read_log
from agentfsm.record import RunRecord

__all__ = ["add_parser", "summary"]

_EXAMPLE = """\
examples:
  agentfsm replay events.jsonl
  agentfsm replay events.jsonl --run-id run_123 --format json
"""


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm replay`."""
    p = subparsers.add_parser(
        "replay",
        help="fold a log and print each run's record",
        description=(
            "Fold a JSON Lines log through the table and print the run records: JSON is a "
            "list of records (the action ledger keyed by action_id); text is a summary."
        ),
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_log_arguments(p)
    p.add_argument("--run-id", type=_args.run_id, help="only this run")
    add_allow_empty(p)
    p.set_defaults(handler=_replay)


def _replay(args: argparse.Namespace) -> int:
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
