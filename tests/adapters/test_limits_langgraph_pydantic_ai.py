"""Issue 31 against LangGraph's `ChatOpenAI` and pydantic-ai's `OpenAIChatModel`, each over a
real OpenAI client talking HTTP to the fake OpenAI API on 127.0.0.1 (`_fake_openai`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agentfsm.adapters.langgraph import GraphRun
from agentfsm.adapters.pydantic_ai import AgentIterRun, UnknownModelError, price_table
from agentfsm.events import Limits
from agentfsm.runtime._metering import MISSING_USAGE
from agentfsm.stores import MemoryEventStore
from tests.adapters._fake_openai import FakeOpenAI, Reply, fake_openai, loopback_only

__all__ = ["fake_openai", "loopback_only"]  # the fixtures, used by name


def _graph(llm: ChatOpenAI) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [llm.invoke(state["messages"])]})
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return graph.compile()


def _chat(fake: FakeOpenAI, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model="gpt-4.1", base_url=fake.base_url, api_key="test", max_retries=0, **kwargs
    )


@pytest.mark.parametrize("mode", ["updates", "messages"])
def test_langgraph_token_limit_trips_with_stream_usage(fake_openai: FakeOpenAI, mode: str) -> None:
    fake_openai.script.append(Reply(text="hello", input_tokens=40, output_tokens=20))
    run = GraphRun(MemoryEventStore(), "r", stream_mode=mode, on_chunk=lambda chunk: None)
    app = _graph(_chat(fake_openai, stream_usage=True))
    done = run.run(app, {"messages": [HumanMessage("hi")]}, limits=Limits(max_tokens=25))
    assert (done.status, done.stop_reason) == ("terminated", "budget")
    assert done.record.stop_detail == "spent 60 > 25 tokens"


def test_langgraph_streamed_without_usage_stops_naming_it(fake_openai: FakeOpenAI) -> None:
    """`stream_mode="messages"` makes ChatOpenAI stream; with a custom base_url it asks for
    no usage unless `stream_usage=True`: the record would say 0 tokens. The run stops."""
    fake_openai.script.append(Reply(text="hello", input_tokens=40, output_tokens=20))
    store = MemoryEventStore()
    run = GraphRun(store, "r", stream_mode="messages", on_chunk=lambda chunk: None)
    done = run.run(
        _graph(_chat(fake_openai)), {"messages": [HumanMessage("hi")]}, limits=Limits(max_tokens=25)
    )
    assert fake_openai.requests[0][1]["stream"] is True
    assert "stream_options" not in fake_openai.requests[0][1]
    assert (done.status, done.stop_reason) == ("terminated", "budget")
    assert done.record.stop_detail.startswith(MISSING_USAGE)
    assert [e.usage for e in store.events("r") if e.type == "model.completed"] == [None]


def test_langgraph_pricing_sees_the_model_name(fake_openai: FakeOpenAI) -> None:
    fake_openai.script.append(Reply(text="hello", input_tokens=1_000_000, output_tokens=0))
    run = GraphRun(MemoryEventStore(), "r", pricing=price_table({"gpt-4.1": (2.0, 8.0)}))
    done = run.run(_graph(_chat(fake_openai)), {"messages": [HumanMessage("hi")]})
    assert done.record.usage.cost == 2.0


def _agent(fake: FakeOpenAI) -> tuple[Agent[None, str], AsyncOpenAI]:
    client = AsyncOpenAI(base_url=fake.base_url, api_key="test", max_retries=0)
    model = OpenAIChatModel("gpt-4.1", provider=OpenAIProvider(openai_client=client))
    return Agent(model), client


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("usage", [True, False], ids=["usage", "no-usage"])
def test_pydantic_ai_token_limit_never_goes_unchecked(
    fake_openai: FakeOpenAI, stream: bool, usage: bool
) -> None:
    fake_openai.script.append(Reply(text="hello", input_tokens=40, output_tokens=20, usage=usage))
    agent, client = _agent(fake_openai)
    on_event = (lambda event: None) if stream else None

    async def go() -> Any:
        async with client:
            run = AgentIterRun(MemoryEventStore(), "r", on_event=on_event)
            return await run.arun(agent, "hi", limits=Limits(max_tokens=25))

    done = asyncio.run(go())
    assert (done.status, done.stop_reason) == ("terminated", "budget")
    detail = done.record.stop_detail
    assert detail == "spent 60 > 25 tokens" if usage else detail.startswith(MISSING_USAGE)


def test_pydantic_ai_unknown_model_under_a_cost_limit(fake_openai: FakeOpenAI) -> None:
    fake_openai.script.append(Reply(text="hello"))
    agent, client = _agent(fake_openai)
    run = AgentIterRun(MemoryEventStore(), "r", pricing=price_table({"gpt-4o": (2.5, 10.0)}))

    async def go() -> Any:
        async with client:
            return await run.arun(agent, "hi", limits=Limits(max_cost=1.0))

    with pytest.raises(UnknownModelError, match=r"'gpt-4\.1'"):
        asyncio.run(go())
    assert run.recorder.store.load("r").status == "failed"
