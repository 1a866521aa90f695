"""The Runner's own overhead per turn, next to the OpenAI Agents SDK and a LangGraph tool loop.

A *turn* is one model call that asks for one tool call, and that tool call. The model and the
tool are instant fakes (a prepared answer, a constant result), so what is measured is each
framework's own machinery. agentfsm does strictly more per turn — five durable events,
each checked against the table, the ledger and the guards before it is written — so this
shows the price of that, per store:

- agentfsm `Runner` on the memory, SQLite (`synchronous=NORMAL` and `FULL`) and PostgreSQL
  (a throwaway local server, fsync off) stores;
- agentfsm `Runner` on a store that writes nothing (it hands back the Runner's own fold of
  each batch): not a store anyone should use, but what the Runner's machinery costs without
  persistence (events built and checked, guards, planning), so the store's share is the
  difference;
- the OpenAI Agents SDK's `Runner.run` with a custom offline `Model`, tracing disabled;
- a LangGraph `StateGraph` (agent node + `ToolNode`) driving the same fake model, no
  checkpointer.

    pip install -e '.[bench]'
    python benchmarks/bench_runtime.py [--turns 20] [--runs 30] [--skip-postgres]

Logging is switched off for the measurement (structlog filtered to CRITICAL): a Runner logs
every transition, and what that costs depends on the application's log configuration.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

# This checkout's agentfsm, not the one the venv has installed (an old checkout's benchmark
# must measure that checkout).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm.record import RunRecord
from agentfsm.runtime import Agent, Decision, ProposedCall, Runner, Tool, ToolContext
from agentfsm.stores import EventStore, Folded, MemoryEventStore, SQLiteEventStore
from agentfsm.stores._append import takes_fold

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")


def _fake_decisions(turns: int) -> Callable[[int], Decision]:
    """Turn n (1-based) asks for one lookup, until the last turn answers."""
    calls = [Decision.call_tools(ProposedCall("lookup", {"n": i})) for i in range(turns)]
    final = Decision.answer("done")
    return lambda turn: final if turn > turns - 1 else calls[turn - 1]


# -- agentfsm ---------------------------------------------------------------------------------


def bench_agentfsm(make_store: Callable[[], EventStore], turns: int, runs: int) -> list[float]:
    """Seconds per turn of the agentfsm Runner, one figure per run."""
    decide = _fake_decisions(turns)

    def model(ctx: Any) -> Decision:
        return decide(ctx.turn)

    def lookup(ctx: ToolContext) -> Any:
        return "ok"

    agent = Agent("bench", model, [Tool("lookup", lookup, side_effects=False)])
    times = []
    store = make_store()
    runner = Runner(store, agent)
    for i in range(runs):
        start = time.perf_counter()
        result = runner.run(f"run-{i}-{time.monotonic_ns()}")
        elapsed = time.perf_counter() - start
        if result.status != "completed" or result.record.turn != turns:
            raise RuntimeError(f"the benchmark run ended '{result.status}'")
        times.append(elapsed / turns)
    store.close()
    return times


class WritesNothing(MemoryEventStore):
    """Hands back the writer's fold of a batch, writing nothing: the Runner without a store."""

    @takes_fold
    def append(
        self,
        run_id: str,
        events: Any,
        expected_version: int,
        *,
        folded: Folded | None = None,
    ) -> RunRecord:
        if folded is None:  # the run's first event: no fold is handed with it
            return super().append(run_id, events, expected_version)
        return folded.after[-1]


# -- OpenAI Agents SDK ------------------------------------------------------------------------


def bench_openai_agents(turns: int, runs: int) -> list[float]:
    """Seconds per turn of `agents.Runner.run` with an instant offline model."""
    from agents import (
        Agent as OAAgent,
    )
    from agents import (
        ModelResponse,
        RunConfig,
        Usage,
        function_tool,
        set_tracing_disabled,
    )
    from agents import (
        Runner as OARunner,
    )
    from agents.models.interface import Model
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)
    calls = [
        [
            ResponseFunctionToolCall(
                id=f"c{i}",
                call_id=f"c{i}",
                type="function_call",
                name="lookup",
                arguments=json.dumps({"n": i}),
            )
        ]
        for i in range(turns)
    ]
    final = [
        ResponseOutputMessage(
            id="m",
            type="message",
            role="assistant",
            status="completed",
            content=[ResponseOutputText(text="done", type="output_text", annotations=[])],
        )
    ]

    class Instant(Model):
        def __init__(self) -> None:
            self.turn = 0

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            self.turn += 1
            output = final if self.turn >= turns else calls[self.turn - 1]
            return ModelResponse(output=output, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    @function_tool
    def lookup(n: int) -> str:
        """Look something up."""
        return "ok"

    async def one() -> float:
        agent = OAAgent(name="bench", model=Instant(), tools=[lookup])
        start = time.perf_counter()
        result = await OARunner.run(
            agent, "go", max_turns=turns + 1, run_config=RunConfig(tracing_disabled=True)
        )
        elapsed = time.perf_counter() - start
        assert result.final_output == "done"
        return elapsed / turns

    async def many() -> list[float]:
        return [await one() for _ in range(runs)]

    return asyncio.run(many())


# -- LangGraph --------------------------------------------------------------------------------


def bench_langgraph(turns: int, runs: int) -> list[float]:
    """Seconds per turn of a LangGraph agent/tool loop with the same instant model."""
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def lookup(n: int) -> str:
        """Look something up."""
        return "ok"

    calls = [
        AIMessage(
            content="",
            tool_calls=[{"name": "lookup", "args": {"n": i}, "id": f"c{i}", "type": "tool_call"}],
        )
        for i in range(turns)
    ]

    def agent(state: MessagesState) -> dict[str, Any]:
        turn = sum(1 for m in state["messages"] if isinstance(m, AIMessage)) + 1
        reply = AIMessage(content="done") if turn >= turns else calls[turn - 1]
        return {"messages": [reply]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([lookup]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition, {"tools": "tools", END: END})
    graph.add_edge("tools", "agent")
    app = graph.compile()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = app.invoke({"messages": [HumanMessage("go")]}, {"recursion_limit": 2 * turns + 5})
        elapsed = time.perf_counter() - start
        assert out["messages"][-1].content == "done"
        times.append(elapsed / turns)
    return times


# -- the table --------------------------------------------------------------------------------


def main() -> None:
    """Measure and print turns/s per framework and store, and ratios to agentfsm (memory)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=20, help="turns per run")
    parser.add_argument("--runs", type=int, default=30, help="runs per row (median reported)")
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    turns, runs = args.turns, args.runs

    rows: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(
            ("agentfsm Runner, memory store", bench_agentfsm(MemoryEventStore, turns, runs))
        )
        rows.append(
            (
                "agentfsm Runner, a store that writes nothing (the Runner's own share)",
                bench_agentfsm(WritesNothing, turns, runs),
            )
        )
        for sync in ("NORMAL", "FULL"):
            path = Path(tmp) / f"bench-{sync}.db"
            rows.append(
                (
                    f"agentfsm Runner, SQLite ({sync})",
                    bench_agentfsm(
                        lambda p=path, s=sync: SQLiteEventStore(p, synchronous=s),  # type: ignore[misc]
                        turns,
                        runs,
                    ),
                )
            )
        if not args.skip_postgres:
            from agentfsm.stores.postgres import PostgresEventStore
            from agentfsm.testing.fixtures.postgres_server import postgres_server

            with postgres_server() as server:
                rows.append(
                    (
                        "agentfsm Runner, PostgreSQL (local, fsync off)",
                        bench_agentfsm(
                            lambda: PostgresEventStore(server.dsn, migrate=True), turns, runs
                        ),
                    )
                )
    rows.append(("OpenAI Agents SDK Runner (no store)", bench_openai_agents(turns, runs)))
    rows.append(("LangGraph agent/tool loop (no checkpointer)", bench_langgraph(turns, runs)))

    base = statistics.median(rows[0][1])
    print(f"\nTurns/s ({turns} turns per run, median of {runs} runs; one tool call per turn)\n")
    print("| runner | turns/s | µs/turn | time vs agentfsm (memory) |")
    print("|---|---:|---:|---:|")
    for name, per_turn in rows:
        median = statistics.median(per_turn)
        print(f"| {name} | {1 / median:,.0f} | {median * 1e6:,.0f} | {median / base:.2f}x |")


if __name__ == "__main__":
    main()
