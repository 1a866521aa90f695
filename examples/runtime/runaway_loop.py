"""A runaway model: it asks for the same status again and again; `loop_detected` stops it.

python examples/runtime/runaway_loop.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from kit import open_store, quiet_logs, show

from agentfsm.events import Limits
from agentfsm.guards import LoopDetector
from agentfsm.runtime import Agent, Decision, ProposedCall, Runner, RunResult, ScriptedModel, Tool
from agentfsm.stores import EventStore

RUN_ID = "runaway-1"


def runner(store: EventStore) -> Runner:
    """A model that never stops asking, a lookup whose answer never changes."""

    def shipment_status(ctx: Any) -> Any:
        return {"order_id": "O-77", "status": "in_transit"}

    model = ScriptedModel(
        [Decision.call_tools(ProposedCall("shipment_status", {"order_id": "O-77"}))],
        repeat_last=True,
        by_turn=True,
    )
    tool = Tool("shipment_status", shipment_status, side_effects=False)
    return Runner(store, Agent("tracker", model, [tool]), guards=[LoopDetector(threshold=3)])


def main(workdir: Path) -> RunResult:
    """Run it; a generous turn limit is never reached: the loop guard stops it first."""
    with open_store(workdir / "runs.db") as store:
        result = runner(store).run(
            RUN_ID, "Tell me when O-77 arrives.", limits=Limits(max_turns=50)
        )
        show(store, result, "runaway loop")
    return result


if __name__ == "__main__":
    quiet_logs()
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp))
