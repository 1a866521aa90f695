"""The support-ticket lifecycle driven by the Runner on SQLite, steered from the command line.

`make demo` runs it in steps, a person's moves made with `agentfsm` between them:

    python examples/demo_ticket.py start --db .demo/tickets.db     # the agent asks to refund
    agentfsm reject t-1 t1.1 --reason "needs a human" ...           # the approver says no,
    agentfsm append t-1 ticket.escalated escalated_to=tier-2 ...    # and hands it to a person
    python examples/demo_ticket.py drive --db .demo/tickets.db     # waiting in `escalated`
    agentfsm append t-1 ticket.handed_back note="refunded by hand" ...
    python examples/demo_ticket.py drive --db .demo/tickets.db     # the agent answers

`ticket.escalated` is an event type of this lifecycle; `escalated` a state of kind
`waiting`, so the Runner returns the run there instead of calling the model, and goes on
once a person hands the ticket back.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm import Agent, Decision, Runner, ScriptedModel, SQLiteEventStore, StoreOptions, Tool
from agentfsm.reducers import Reducer
from agentfsm.runtime import ProposedCall, ToolPolicy
from examples.lifecycles.ticket import TICKET_TABLE

RUN = "t-1"


def _answer(ctx: Any) -> Decision:
    note = ctx.record.custom.get("note")
    if note is not None:
        return Decision.answer(f"Your refund is done ({note}).")
    return Decision.answer("A person will look at your refund.")


def _agent() -> Agent:
    model = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("refund", {"order_id": "O-1001", "amount": 40})),
            _answer,
        ],
        by_turn=True,
    )
    refund = Tool("refund", lambda ctx: {"refunded": ctx.args["amount"]})
    return Agent("support", model, [refund], policy=ToolPolicy(approval={"refund"}))


def main(argv: list[str] | None = None) -> int:
    """`start` a ticket run, or `drive` it on after a person's move."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("start", "drive"))
    parser.add_argument("--db", type=Path, required=True)
    args = parser.parse_args(argv)
    options = StoreOptions(reducer=Reducer(TICKET_TABLE))
    with SQLiteEventStore(args.db, options=options) as store:
        runner = Runner(store, _agent())
        if args.step == "start":
            result = runner.run(RUN, "Refund order O-1001, charged twice")
        else:
            result = runner.drive(RUN)
        kind = TICKET_TABLE.kind(result.status)
        print(f"run {RUN}: {result.status} ({kind}) {result.record.custom or ''}".rstrip())
        if result.final_output is not None and result.status == "completed":
            print(f"  answer: {result.final_output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
