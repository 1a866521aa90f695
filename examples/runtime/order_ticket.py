"""The order/ticket run: look an order up, open a support ticket, answer with its number.

python examples/runtime/order_ticket.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from kit import EffectLedger, open_store, order_tools, quiet_logs, show

from agentfsm.events import Limits, Usage
from agentfsm.runtime import Agent, Decision, ProposedCall, Runner, RunResult, ScriptedModel
from agentfsm.stores import EventStore

RUN_ID = "order-O-1001"
OBJECTIVE = "Look up order O-1001; if it is paid but not shipped, open a ticket."
LIMITS = Limits(max_turns=6, max_tokens=20_000)


def model() -> ScriptedModel:
    """An offline model that looks the order up, opens a ticket, then answers."""
    usage = Usage(input_tokens=420, output_tokens=40, cost=0.002)
    return ScriptedModel(
        [
            Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1001"}), usage=usage),
            lambda ctx: Decision.call_tools(
                ProposedCall("create_ticket", {"order_id": ctx.results[0].result["order_id"]}),
                usage=usage,
            ),
            lambda ctx: Decision.answer(
                f"Order O-1001 is paid but not shipped; I opened ticket "
                f"{ctx.results[0].result['ticket_id']}.",
                usage=usage,
            ),
        ],
        by_turn=True,
    )


def runner(store: EventStore, ledger: EffectLedger | None = None) -> Runner:
    """The support agent on `store`."""
    return Runner(store, Agent("support", model(), order_tools(ledger)))


def main(workdir: Path) -> RunResult:
    """Run it on a SQLite store in `workdir` and print its path and final record."""
    with open_store(workdir / "runs.db") as store:
        result = runner(store, EffectLedger(workdir / "effects.db")).run(
            RUN_ID, OBJECTIVE, limits=LIMITS
        )
        show(store, result, "order/ticket")
    return result


if __name__ == "__main__":
    quiet_logs()
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp))
