"""The agents the pydantic-ai adapter tests drive (also resumed from a subprocess)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, ModelRetry, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

CALLS: list[str] = []
USAGE = RequestUsage(input_tokens=10, output_tokens=5)


def call(name: str, call_id: str, **args: Any) -> ModelResponse:
    """A response asking for one tool call (10 input, 5 output tokens)."""
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)], usage=USAGE)


def answer(text: str) -> ModelResponse:
    """A response with a final answer (10 input, 5 output tokens)."""
    return ModelResponse(parts=[TextPart(text)], usage=USAGE)


def scripted(*responses: ModelResponse) -> FunctionModel:
    """A model answering the n-th request of a run (counted in its history) with responses[n]."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return responses[sum(isinstance(msg, ModelResponse) for msg in messages)]

    return FunctionModel(respond)


def make_agent(*responses: ModelResponse, on_tool: Callable[[], None] | None = None) -> Agent:
    """An agent with get_weather and refund (refund needs approval)."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        scripted(*responses), output_type=[str, DeferredToolRequests], name="weather"
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        CALLS.append(f"get_weather {city}")
        if on_tool is not None:
            on_tool()
        if city == "Atlantis":
            raise ModelRetry("no such city")
        return f"sunny in {city}"

    @agent.tool_plain(requires_approval=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        CALLS.append(f"refund {order_id}")
        return f"refunded {order_id}"

    return agent


REFUND = (call("refund", "call_r1", order_id="O-1"), answer("Done."))


def manager_agent(run: Any) -> Agent[None, str | DeferredToolRequests]:
    """A manager whose tool `refunds` delegates to the refund agent (its refund needs approval)."""
    manager: Agent[None, str | DeferredToolRequests] = Agent(
        scripted(call("refunds", "call_m1", question="refund O-1"), answer("The refund is done.")),
        output_type=[str, DeferredToolRequests],
        name="manager",
    )
    child = make_agent(*REFUND)

    @manager.tool
    async def refunds(ctx: RunContext[None], question: str) -> Any:
        """Ask the refunds agent."""
        return await run.delegate(ctx, child, question)

    return manager


def _main(db: str, run_id: str, state_file: str) -> None:
    """Resume `run_id` in this new process, from our store and the saved message history."""
    import asyncio
    import json
    import socket

    from structlog.testing import capture_logs

    from agentfsm.adapters.pydantic_ai import AgentIterRun
    from agentfsm.stores import SQLiteEventStore

    def refuse(self: socket.socket, address: object) -> None:
        raise RuntimeError(f"network access attempted: {address!r}")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    history = None  # "-": the history our store kept when the run paused
    if state_file != "-":
        with open(state_file, encoding="utf-8") as f:
            history = f.read()
    run = AgentIterRun(SQLiteEventStore(db), run_id)
    agent = manager_agent(run) if run_id == "m1" else make_agent(*REFUND)
    with capture_logs():
        done = asyncio.run(run.resume(agent, history))
    print(json.dumps({"status": done.status, "final_output": done.final_output, "calls": CALLS}))


if __name__ == "__main__":
    import sys

    _main(*sys.argv[1:4])
