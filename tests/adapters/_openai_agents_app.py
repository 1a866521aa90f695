"""The agents and tools the OpenAI Agents SDK adapter tests drive (also from a subprocess).

Run as `python -m tests.adapters._openai_agents_app STORE RUN_ID STATE_FILE` (STORE: a SQLite
file or a PostgreSQL conninfo) it resumes a run
paused for approval, in a new process, and prints the outcome as JSON (STATE_FILE `-`: from
the state our store kept).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
from typing import Any

os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

from agents import Agent, Usage, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agentfsm.adapters.openai_agents import tool_failure

set_tracing_disabled(True)

USAGE = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
CALLS: list[str] = []


@function_tool(failure_error_function=tool_failure)
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    CALLS.append(f"get_weather {city}")
    if city == "Atlantis":
        raise ValueError("no such city")
    return f"sunny in {city}"


@function_tool(needs_approval=True, failure_error_function=tool_failure)
def refund(order_id: str) -> str:
    """Refund an order."""
    CALLS.append(f"refund {order_id}")
    return f"refunded {order_id}"


def scripted(*steps: Any) -> ScriptedModel:
    """A scripted model reporting 10 input and 5 output tokens per call."""
    return ScriptedModel(list(steps), default_usage=USAGE)


def refund_agent(after_tool: str = "Done.") -> Agent[Any]:
    """An agent that asks to refund O-1 (needs approval), then answers."""
    model = scripted(
        [function_call("refund", {"order_id": "O-1"}, call_id="call_r1")],
        [assistant_message(after_tool)],
    )
    return Agent(name="refunds", model=model, tools=[refund])


def resumed_agent() -> Agent[Any]:
    """The refund agent as a new process rebuilds it: only the answer after the tool is left."""
    return Agent(name="refunds", model=scripted([assistant_message("Done.")]), tools=[refund])


def manager_agent(run: Any, resumed: bool = False) -> Agent[Any]:
    """A manager whose agent tool `refunds` asks a refunds agent, which needs approval.

    `resumed`: as a new process rebuilds it, with only the answers after the refund left.
    """
    if resumed:
        child = Agent(name="refunds", model=scripted([assistant_message("O-1 refunded.")]))
        manager = scripted([assistant_message("The refund is done.")])
    else:
        child = Agent(
            name="refunds",
            model=scripted(
                [function_call("refund", {"order_id": "O-1"}, call_id="call_r1")],
                [assistant_message("O-1 refunded.")],
            ),
        )
        manager = scripted(
            [function_call("refunds", {"input": "refund O-1"}, call_id="call_m1")],
            [assistant_message("The refund is done.")],
        )
    child.tools = [refund]
    return Agent(name="manager", model=manager, tools=[run.agent_tool(child)])


def _main(db: str, run_id: str, state_file: str) -> None:
    def refuse(self: socket.socket, address: object) -> None:
        raise RuntimeError(f"network access attempted: {address!r}")

    socket.socket.connect = refuse  # type: ignore[method-assign]

    from agentfsm.adapters.openai_agents import AgentsRun
    from agentfsm.stores import SQLiteEventStore

    state = None  # "-": the state our store kept when the run paused
    if state_file != "-":
        with open(state_file, encoding="utf-8") as f:
            state = json.load(f)
    if db.startswith("postgresql://") or "dbname=" in db:  # the same store, on PostgreSQL
        from agentfsm.stores.postgres import PostgresEventStore

        store: Any = PostgresEventStore(db)
    else:
        store = SQLiteEventStore(db)
    run = AgentsRun(store, run_id)
    agent = manager_agent(run, resumed=True) if run_id == "m1" else resumed_agent()
    done = asyncio.run(run.adrive(agent, state))
    print(
        json.dumps(
            {"status": done.status, "final_output": done.final_output, "calls": CALLS},
        )
    )


if __name__ == "__main__":
    _main(*sys.argv[1:4])
