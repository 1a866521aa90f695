"""The sync `run` then the sync `drive` in one process over one shared `AsyncOpenAI` client
(issue 31, item 5): each adapter's sync calls share one event loop the thread keeps, so the client's
pooled connections (bound to the loop that opened them) keep working across the pause.
Real clients, the fake OpenAI API on 127.0.0.1."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agentfsm.adapters.openai_agents import AgentsRun
from agentfsm.adapters.pydantic_ai import AgentIterRun
from agentfsm.runtime import approve
from agentfsm.stores import MemoryEventStore
from tests.adapters._fake_openai import Call, FakeOpenAI, Reply, fake_openai, loopback_only

__all__ = ["fake_openai", "loopback_only"]  # the fixtures, used by name

set_tracing_disabled(True)

_SCRIPT = [
    Reply(calls=(Call("c1", "refund", {"order_id": "O-7"}),)),
    Reply(text="Refunded O-7."),
]


def _close(client: AsyncOpenAI) -> None:
    from agentfsm.adapters._sync import run_blocking

    run_blocking(client.close(), "close")  # on the loop its connections belong to


def test_agents_sdk_sync_run_then_drive_share_a_client(fake_openai: FakeOpenAI) -> None:
    fake_openai.script += list(_SCRIPT)
    client = AsyncOpenAI(base_url=fake_openai.base_url, api_key="test", max_retries=0)

    @function_tool(needs_approval=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        return f"refunded {order_id}"

    agent: Agent[Any] = Agent(
        name="refunds",
        model=OpenAIChatCompletionsModel(model="gpt-4.1", openai_client=client),
        tools=[refund],
    )
    store = MemoryEventStore()
    try:
        paused = AgentsRun(store, "r").run(agent, "refund O-7")
        assert paused.status == "waiting_approval"
        approve(store, "r", "c1", approver="alice")
        done = AgentsRun(store, "r").drive(agent)
        assert (done.status, done.final_output) == ("completed", "Refunded O-7.")
    finally:
        _close(client)


def test_pydantic_ai_sync_run_then_drive_share_a_client(fake_openai: FakeOpenAI) -> None:
    fake_openai.script += list(_SCRIPT)
    client = AsyncOpenAI(base_url=fake_openai.base_url, api_key="test", max_retries=0)
    model = OpenAIChatModel("gpt-4.1", provider=OpenAIProvider(openai_client=client))
    agent = PydanticAgent(model, output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        return f"refunded {order_id}"

    store = MemoryEventStore()
    try:
        paused = AgentIterRun(store, "r").run(agent, "refund O-7")
        assert paused.status == "waiting_approval"
        approve(store, "r", "c1", approver="alice")
        done = AgentIterRun(store, "r").drive(agent)
        assert (done.status, done.final_output) == ("completed", "Refunded O-7.")
    finally:
        _close(client)


def test_sync_run_inside_a_running_loop_is_refused_up_front() -> None:
    store = MemoryEventStore()
    agent: Agent[Any] = Agent(name="a")

    async def inside() -> None:
        AgentsRun(store, "r").run(agent, "hi")

    refused = r"run\(\) cannot be called while an event loop is running .*: await arun\(\) instead"
    with pytest.raises(RuntimeError, match=refused):
        asyncio.run(inside())
    assert store.runs() == []  # nothing recorded
