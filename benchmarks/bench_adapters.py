"""The OpenAI Agents SDK adapter's cost per turn: `Runner.run` alone vs through `AgentsRun`.

Each run is 20 turns of an offline scripted model asking for one instant tool, then an
answer. Then subagents: 20 turns each calling an agent tool whose agent answers at once, the
SDK's `as_tool` vs `AgentsRun.agent_tool` (a run of its own per call). Rounds interleave the
contenders; medians of 20 runs. Run:
`.venv/bin/python benchmarks/bench_adapters.py` (needs the openai-agents extra).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

import structlog

# This checkout's agentfsm, not the one the venv has installed (an old checkout's benchmark
# must measure that checkout).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agentfsm.adapters.openai_agents import AgentsRun
from agentfsm.stores import MemoryEventStore, SQLiteEventStore

TURNS = 20
ROUNDS = 20


@function_tool
def echo(q: str) -> str:
    """Return the query."""
    return q


def agent(tool: Any = echo) -> Agent[Any]:
    steps: list[Any] = [
        [function_call(tool.name, {"q": str(i)}, call_id=f"c{i}")] for i in range(TURNS - 1)
    ]
    return Agent(name="a", model=ScriptedModel([*steps, [assistant_message("done")]]), tools=[tool])


def helper() -> Agent[Any]:
    """The subagent: answers each call at once."""
    answers = [[assistant_message(f"answer {i}")] for i in range(TURNS)]
    return Agent(name="helper", model=ScriptedModel(answers))


async def measure(contenders: list[tuple[str, Callable[[int], Awaitable[None]]]]) -> None:
    times: dict[str, list[float]] = {name: [] for name, _ in contenders}
    for i in range(ROUNDS):
        for name, fn in contenders:
            start = time.perf_counter()
            await fn(i)
            times[name].append(time.perf_counter() - start)
    base = statistics.median(times[contenders[0][0]])
    for name, _ in contenders:
        median = statistics.median(times[name])
        print(f"{name:32s} {median * 1e6 / TURNS:7.0f} µs/turn  {median / base:5.2f}x")


async def main() -> None:
    set_tracing_disabled(True)
    structlog.configure(logger_factory=structlog.ReturnLoggerFactory())  # this script only
    db = os.path.join(tempfile.mkdtemp(), "runs.db")

    async def raw(i: int) -> None:
        await Runner.run(agent(), "go", max_turns=100)

    async def memory(i: int) -> None:
        await AgentsRun(MemoryEventStore(), f"m{i}").arun(agent(), "go", max_turns=100)

    async def sqlite(i: int) -> None:
        store = SQLiteEventStore(db, synchronous="NORMAL")
        await AgentsRun(store, f"s{i}").arun(agent(), "go", max_turns=100)

    await measure(
        [
            ("Runner.run (no store)", raw),
            ("AgentsRun, memory store", memory),
            ("AgentsRun, SQLite NORMAL", sqlite),
        ]
    )

    async def sdk_as_tool(i: int) -> None:
        tool = helper().as_tool("ask", "Ask the helper.")
        await Runner.run(agent(tool), "go", max_turns=100)

    async def agent_tool(i: int) -> None:
        run = AgentsRun(MemoryEventStore(), f"t{i}")
        await run.arun(agent(run.agent_tool(helper(), tool_name="ask")), "go", max_turns=100)

    print()
    await measure(
        [
            ("as_tool subagents (no store)", sdk_as_tool),
            ("agent_tool subagents, memory", agent_tool),
        ]
    )


if __name__ == "__main__":
    asyncio.run(main())
