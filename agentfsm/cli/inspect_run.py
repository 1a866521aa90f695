"""`agentfsm inspect`: one run's path, move by move."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from agentfsm.cli import _args
from agentfsm.cli._common import Parser
from agentfsm.cli._io import Style
from agentfsm.cli._output import print_json, shown
from agentfsm.cli.validate import add_log_arguments, opened_log
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
    p.add_argument(
        "--run-id", type=_args.run_id, help="the run (needed when the log holds several)"
    )
    p.set_defaults(handler=_inspect)


def _inspect(args: argparse.Namespace) -> int:
    lines, reducer, counter = opened_log(args, "inspect")
    table = reducer.table
    with counter.checking():
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
                "caused_by": step.caused_by,
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
        print_json(lambda: out, "inspect")
    else:
        style = Style(sys.stdout)
        print(f"run {shown(path.run_id)}")
        for r in rows:
            cond = f" [{shown(r['condition'])}]" if r["condition"] else ""
            guards = style.dim(f"  guards passed: {', '.join(r['guards'])}") if r["guards"] else ""
            move = f"{shown(r['event']):<22} {shown(r['from'])} -> {shown(r['to'])}"
            # An event a call or a decision proposed says which (a refused one, why).
            why = "refused, " if r["event"] == "emit.refused" else "caused by "
            by = style.dim(f"  {why}{shown(r['caused_by'])}") if r["caused_by"] else ""
            print(f"  {r['sequence']:>4}  {move}{cond}{guards}{by}")
        end = style.status(shown(path.final_state), path.terminal)
        if path.stop_reason:
            end += f" ({shown(path.stop_reason)}: {shown(str(path.stop_detail))})"
        print(f"  ends in {end}")
        if refusal is not None:
            # A refused event is named by its line; one folded from a line that parsed has
            # only its sequence.
            where = f"line {refusal.line}" if refusal.line else f"sequence {refusal.sequence}"
            # The message is the error's reason (`is not allowed: ...`), which leaves the
            # event to the sentence it goes in.
            said = refusal.message
            if refusal.event is not None:
                said = f"event '{refusal.event}' {said}"
            print(style.bad(f"  refused at {where}: ") + shown(said))
    if refusal is None:
        return 0
    # A line that is not an event is bad input (2), not a lifecycle verdict (1).
    return 2 if refusal.event is None else 1
