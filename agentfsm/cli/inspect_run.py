"""`agentfsm inspect`: one run's path, move by move."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from agentfsm.cli._common import Parser
from agentfsm.cli._io import Style, stream_lines
from agentfsm.cli.validate import add_log_arguments, reducer_from_args
from agentfsm.diagrams import trajectory_from_jsonl

__all__ = ["add_parser"]

_EXAMPLE = """\
examples:
  agentfsm inspect events.jsonl --run-id run_123
  agentfsm inspect events.jsonl --run-id run_123 --format json
"""


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm inspect`."""
    p = subparsers.add_parser(
        "inspect",
        help="show one run's path move by move",
        description=(
            "Show a run's path through the table: sequence, event, from -> to, the condition "
            "that chose the target and the limit guards checked on that edge; where the log "
            "breaks the lifecycle, the refused event and why."
        ),
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_log_arguments(p)
    p.add_argument("--run-id", help="the run (needed when the log holds several)")
    p.set_defaults(handler=_inspect)


def _inspect(args: argparse.Namespace) -> int:
    reducer = reducer_from_args(args, "inspect")
    table = reducer.table
    lines = list(stream_lines(args.file, "inspect", quiet=args.quiet))
    path = trajectory_from_jsonl(lines, table, run_id=args.run_id)
    rows: list[dict[str, Any]] = []
    for step in path.steps:
        edge = next(
            (
                t
                for t in table.edges(step.source, step.event)
                if t.target == step.target
                and (t.condition.name if t.condition else None) == step.condition
            ),
            None,
        )
        rows.append(
            {
                "sequence": step.sequence,
                "event": step.event,
                "from": step.source,
                "to": step.target,
                "condition": step.condition,
                "guards": list(edge.guards) if edge else [],
            }
        )
    refusal = path.refusal
    if args.format == "json":
        out = {
            "run_id": path.run_id,
            "steps": rows,
            "final_state": path.final_state,
            "stop_reason": path.stop_reason,
            "refused": None
            if refusal is None
            else {"sequence": refusal.sequence, "event": refusal.event, "line": refusal.line,
                  "state": refusal.state, "message": refusal.message},
        }  # fmt: skip
        print(json.dumps(out, ensure_ascii=False, sort_keys=True))
    else:
        style = Style(sys.stdout)
        print(f"run {path.run_id}")
        for r in rows:
            cond = f" [{r['condition']}]" if r["condition"] else ""
            guards = style.dim(f"  guards passed: {', '.join(r['guards'])}") if r["guards"] else ""
            print(f"  {r['sequence']:>4}  {r['event']:<22} {r['from']} -> {r['to']}{cond}{guards}")
        end = style.status(path.final_state, path.terminal)
        if path.stop_reason:
            end += f" ({path.stop_reason}: {path.stop_detail})"
        print(f"  ends in {end}")
        if refusal is not None:
            print(style.bad(f"  refused at line {refusal.line}: ") + refusal.message)
    return 0 if refusal is None else 1
