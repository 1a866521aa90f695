"""A refund that waits for an approver: the run `make demo` leaves open for the web UI.

The agent looks the order up and asks to refund it; `refund` needs a person's approval, so
the run returns waiting in `waiting_approval`, and stays there: `agentfsm ui --store
.demo/runs.db` opens on an inbox with this call in it (approve or reject it there, or with
`agentfsm approve refund-77 t2.1 --store .demo/runs.db`, then `drive` goes on).

    python examples/runtime/refund_awaiting_approval.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from kit import open_store, quiet_logs, show

from agentfsm.runtime import (
    Agent,
    Decision,
    ProposedCall,
    Runner,
    RunResult,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolPolicy,
)
from agentfsm.stores import EventStore

RUN_ID = "refund-77"


def model() -> ScriptedModel:
    """Look the order up, ask to refund it, then say what was decided."""
    return ScriptedModel(
        [
            Decision.call_tools(ProposedCall("get_order", {"order_id": 77})),
            Decision.call_tools(ProposedCall("refund", {"order_id": 77, "amount": 129.0})),
            lambda ctx: Decision.answer(f"Refund of order 77: {ctx.results[0].status}."),
        ],
        by_turn=True,
    )


def tools() -> list[Tool]:
    """A lookup, and `refund`, which moves money."""

    def get_order(ctx: ToolContext) -> Any:
        return {"order_id": ctx.args["order_id"], "total": 129.0, "status": "delivered"}

    def refund(ctx: ToolContext) -> Any:
        return {"order_id": ctx.args["order_id"], "refunded": ctx.args["amount"]}

    return [Tool("get_order", get_order, side_effects=False), Tool("refund", refund)]


def runner(store: EventStore) -> Runner:
    """The refunds agent; `refund` needs a person's approval (no expiry: it waits for them)."""
    return Runner(store, Agent("refunds", model(), tools(), ToolPolicy(approval={"refund"})))


def main(workdir: Path) -> RunResult:
    """Run it on a SQLite store in `workdir` until it waits for the approver."""
    with open_store(workdir / "runs.db") as store:
        result = runner(store).run(RUN_ID, "Refund order 77: the parcel arrived broken")
        show(store, result, "a refund waiting for its approver")
    return result


if __name__ == "__main__":
    quiet_logs()
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp))
