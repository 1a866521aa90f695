"""A token budget stops a run before it overspends, keeping what it found so far.

Each model call reserves its estimate up front (`RunnerConfig.reserve`); the call that could
take the run past `max_tokens` is refused and the run ends `terminated` (`budget`).

    python examples/runtime/budget_stop.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from kit import open_store, quiet_logs, show

from agentfsm.events import Limits, Usage
from agentfsm.runtime import (
    Agent,
    Decision,
    ProposedCall,
    Runner,
    RunnerConfig,
    RunResult,
    ScriptedModel,
    Tool,
)
from agentfsm.stores import EventStore

RUN_ID = "budget-1"


def runner(store: EventStore) -> Runner:
    """A research model that reads page after page at 700 tokens a turn."""

    def read_page(ctx: Any) -> Any:
        return {"page": ctx.args["page"], "text": f"page {ctx.args['page']} of the manual"}

    spend = Usage(input_tokens=600, output_tokens=100)
    model = ScriptedModel(
        [
            lambda ctx: Decision.call_tools(
                ProposedCall("read_page", {"page": ctx.turn}), usage=spend
            )
        ],
        repeat_last=True,
        by_turn=True,
    )
    config = RunnerConfig(reserve=Usage(input_tokens=700))
    return Runner(
        store,
        Agent("researcher", model, [Tool("read_page", read_page, side_effects=False)]),
        config=config,
    )


def main(workdir: Path) -> RunResult:
    """Run with 2,500 tokens: the fourth call would need 2,100 + 700 and is refused."""
    with open_store(workdir / "runs.db") as store:
        result = runner(store).run(RUN_ID, "Summarise the manual.", limits=Limits(max_tokens=2500))
        show(store, result, "budget stop")
    return result


if __name__ == "__main__":
    quiet_logs()
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp))
