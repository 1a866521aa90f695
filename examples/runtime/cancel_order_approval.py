"""Cancel an order with a person's approval, given from another process.

The run pauses in `waiting_approval` (this process could exit here); a second process
approves the exact call with `agentfsm approve`, through the SQLite store; `drive`
then runs that call, re-checked by the policy, without asking the model again.

    python examples/runtime/cancel_order_approval.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from kit import EffectLedger, open_store, quiet_logs, show

from agentfsm.events import Limits
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

RUN_ID = "cancel-123"
LIMITS = Limits(max_turns=5)


def model() -> ScriptedModel:
    """Look the order up, ask to cancel it, then report what happened."""

    def report(ctx: Any) -> Decision:
        action = ctx.results[0]
        if action.status == "succeeded":
            return Decision.answer(f"Order 123 is {action.result['status']}.")
        return Decision.answer(f"Order 123 was not cancelled ({action.status}: {action.reason}).")

    return ScriptedModel(
        [
            Decision.call_tools(ProposedCall("get_order", {"order_id": 123})),
            Decision.call_tools(ProposedCall("cancel_order", {"order_id": 123})),
            report,
        ],
        by_turn=True,
    )


def tools(ledger: EffectLedger | None) -> list[Tool]:
    """A lookup, and `cancel_order`, which acts on the world and ignores idempotency keys."""

    def get_order(ctx: ToolContext) -> Any:
        return {"order_id": ctx.args["order_id"], "status": "open"}

    def cancel_order(ctx: ToolContext) -> Any:
        result = {"order_id": ctx.args["order_id"], "status": "cancelled"}
        return result if ledger is None else ledger.act(ctx, result, honour_key=False)

    return [Tool("get_order", get_order, side_effects=False), Tool("cancel_order", cancel_order)]


POLICY = ToolPolicy(approval={"cancel_order"}, expires_in=timedelta(hours=1))


def runner(store: EventStore, ledger: EffectLedger | None = None) -> Runner:
    """The orders agent; `cancel_order` needs a person's approval."""
    return Runner(store, Agent("orders", model(), tools(ledger), POLICY))


def approve_elsewhere(db: Path, action_id: str, who: str) -> None:
    """Approve from a separate process with the command line, through the store file."""
    command = ["agentfsm", "approve", RUN_ID, action_id, "--approver", who, "--store", str(db)]
    print(f"  [process 2] $ {' '.join(command[:-1])} runs.db")
    done = subprocess.run(  # noqa: S603  (this interpreter, running our own CLI)
        [sys.executable, "-m", *command], check=True, capture_output=True, text=True
    )
    for line in done.stdout.splitlines():  # the call it approved, then the run's status
        print(f"  [process 2] {line}")


def main(workdir: Path) -> RunResult:
    """Run until the approval, approve from another process, drive it to the end."""
    db = workdir / "runs.db"
    ledger = EffectLedger(workdir / "effects.db")
    with open_store(db) as store:
        first = runner(store, ledger).run(RUN_ID, "Cancel order 123.", limits=LIMITS)
        (pending,) = first.pending_approvals
        print(
            f"  [process 1] run is '{first.status}': {pending.tool}({pending.arguments}) "
            f"waits as {pending.action_id}"
        )
    approve_elsewhere(db, pending.action_id, "alice@support")
    with open_store(db) as store:
        result = runner(store, ledger).drive(RUN_ID)
        show(store, result, "cancel order with approval")
    return result


if __name__ == "__main__":
    quiet_logs()
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp))
