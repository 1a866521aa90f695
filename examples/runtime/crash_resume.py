"""A worker dies (SIGKILL) in the middle of a run, twice; the run is driven on from the store.

1. Process A runs the order/ticket run and is killed inside `create_ticket`, right after
   the ticket system acted and before the result was recorded.
2. Process B drives it on: `create_ticket` is idempotent, so it is called again with the same
   idempotency key (the ticket system returns the first ticket; no second one); then B is
   killed inside `send_confirmation`, after the email went out.
3. This process drives it on: `send_confirmation` is not idempotent, so it is *not* sent again:
   it is recorded `outcome_unknown` and surfaced, and the model is told.

    python examples/runtime/crash_resume.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from kit import EffectLedger, open_store, quiet_logs, show

from agentfsm.runtime import (
    Agent,
    Decision,
    ProposedCall,
    Runner,
    RunResult,
    ScriptedModel,
    Tool,
    ToolContext,
)
from agentfsm.stores import EventStore

RUN_ID = "crash-1"


def runner(store: EventStore, ledger: EffectLedger, die_in: str | None) -> Runner:
    """Open a ticket, email the customer, answer; `die_in` names the tool to die in."""

    def act(ctx: ToolContext, result: Any, honour_key: bool) -> Any:
        value = ledger.act(ctx, result, honour_key=honour_key)
        if ctx.tool == die_in:
            os.kill(os.getpid(), signal.SIGKILL)  # the effect happened; the result is lost
        return value

    def create_ticket(ctx: ToolContext) -> Any:
        return act(ctx, {"ticket_id": "T-9001"}, honour_key=True)

    def send_confirmation(ctx: ToolContext) -> Any:
        return act(ctx, {"sent_to": ctx.args["to"]}, honour_key=False)

    def answer(ctx: Any) -> Decision:
        email = next(a for a in ctx.results if a.tool == "send_confirmation")
        note = "sent" if email.status == "succeeded" else f"{email.status}: please check"
        return Decision.answer(f"Ticket T-9001 is open; confirmation email {note}.")

    model = ScriptedModel(
        [
            Decision.call_tools(
                ProposedCall("create_ticket", {"order_id": "O-1001"}),
                ProposedCall("send_confirmation", {"to": "customer@example.com"}),
            ),
            answer,
        ],
        by_turn=True,
    )
    tools = [
        Tool("create_ticket", create_ticket, idempotent=True),
        Tool("send_confirmation", send_confirmation),
    ]
    return Runner(store, Agent("support", model, tools))


def worker(workdir: Path, die_in: str) -> None:
    """What processes A and B do: start or drive on the run, and die in `die_in`."""
    with open_store(workdir / "runs.db") as store:
        r = runner(store, EffectLedger(workdir / "effects.db"), die_in)
        try:
            store.load(RUN_ID)
        except LookupError:
            r.run(RUN_ID, "Open a ticket for O-1001 and tell the customer.")
        else:
            r.drive(RUN_ID)


def main(workdir: Path) -> RunResult:
    """Kill two workers at two points, then drive the run here and print what happened."""
    for die_in in ("create_ticket", "send_confirmation"):
        code = subprocess.run(  # noqa: S603  (this interpreter, this very script)
            [sys.executable, __file__, "--worker", str(workdir), die_in], check=False
        ).returncode
        print(f"  worker killed inside {die_in} (exit {code})")
    ledger = EffectLedger(workdir / "effects.db")
    with open_store(workdir / "runs.db") as store:
        result = runner(store, ledger, None).drive(RUN_ID)
        show(store, result, "crash and resume")
    print(f"  ticket system / mail server effects per key: {ledger.effects()}")
    print(f"  calls per key: {ledger.calls()}")
    print(f"  unknown outcomes: {[(a.action_id, a.tool) for a in result.unknown_outcomes]}")
    return result


if __name__ == "__main__":
    quiet_logs()
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(Path(sys.argv[2]), sys.argv[3])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
