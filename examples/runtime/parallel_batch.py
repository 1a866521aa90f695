"""One model decision, five calls, run concurrently by the AsyncRunner.

Three warehouse lookups run side by side; two stock reservations share the concurrency key
`stock`, so they run one after the other, never overlapping. The model is called again only
once every call of the batch is resolved.

    python examples/runtime/parallel_batch.py
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from kit import open_store, quiet_logs, show

from agentfsm.runtime import (
    Agent,
    AsyncRunner,
    Decision,
    ProposedCall,
    RunResult,
    ScriptedModel,
    Tool,
    ToolContext,
)
from agentfsm.stores import ThreadedAsyncEventStore

RUN_ID = "parallel-1"


class Flight:
    """Counts calls in flight, to show the overlap."""

    def __init__(self) -> None:
        self.now = 0
        self.peak = 0
        self.stock_peak = 0
        self.stock_now = 0

    async def hold(self, ctx: ToolContext, stock: bool) -> None:
        self.now += 1
        self.peak = max(self.peak, self.now)
        if stock:
            self.stock_now += 1
            self.stock_peak = max(self.stock_peak, self.stock_now)
        await asyncio.sleep(0.05)  # a network call
        self.now -= 1
        if stock:
            self.stock_now -= 1


def agent(flight: Flight) -> Agent:
    """Check three warehouses and reserve stock twice, in one batch."""

    async def warehouse(ctx: ToolContext) -> Any:
        await flight.hold(ctx, stock=False)
        return {"warehouse": ctx.args["site"], "units": len(ctx.args["site"]) * 3}

    async def reserve(ctx: ToolContext) -> Any:
        await flight.hold(ctx, stock=True)
        return {"reserved": ctx.args["units"], "key": ctx.idempotency_key}

    def answer(ctx: Any) -> Decision:
        units = sum(a.result["units"] for a in ctx.results if a.tool == "warehouse")
        return Decision.answer(f"{units} units across 3 warehouses; 2 reservations made.")

    model = ScriptedModel(
        [
            Decision.call_tools(
                ProposedCall("warehouse", {"site": "north"}),
                ProposedCall("warehouse", {"site": "south"}),
                ProposedCall("warehouse", {"site": "east"}),
                ProposedCall("reserve", {"units": 2}),
                ProposedCall("reserve", {"units": 3}),
            ),
            answer,
        ],
        by_turn=True,
    )
    tools = [
        Tool("warehouse", warehouse, side_effects=False),
        Tool("reserve", reserve, idempotent=True, concurrency_key="stock"),
    ]
    return Agent("stock", model, tools)


async def _run(workdir: Path, flight: Flight) -> RunResult:
    store = ThreadedAsyncEventStore(open_store(workdir / "runs.db"))
    try:
        return await AsyncRunner(store, agent(flight)).run(RUN_ID, "How much stock, and reserve.")
    finally:
        await store.close()


def main(workdir: Path) -> RunResult:
    """Run the batch and print the peak overlap (3 lookups + 1 reservation at most)."""
    flight = Flight()
    result = asyncio.run(_run(workdir, flight))
    with open_store(workdir / "runs.db") as store:
        show(store, result, "parallel batch")
    print(f"  calls in flight at once: {flight.peak}; reservations at once: {flight.stock_peak}")
    return result


if __name__ == "__main__":
    quiet_logs()
    with tempfile.TemporaryDirectory() as tmp:
        main(Path(tmp))
