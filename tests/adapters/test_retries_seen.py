"""Where each SDK's client retries a 500 (issue 31, item 3), as its real client does it against
the fake OpenAI API on 127.0.0.1: how many HTTP attempts stand behind one `model.started`.

These tests pin what docs/adapters.md ("Retries") states per SDK: the OpenAI client retries a
500 twice by default (three attempts) inside one model call, which the guards see as one
call; a client built with `max_retries=0` makes each failed attempt end the run, recorded
(`run.failed` naming the status).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, OpenAIChatCompletionsModel, set_tracing_disabled
from langchain_core.messages import HumanMessage
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, MessagesState, StateGraph
from openai import AsyncOpenAI
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from agentfsm.adapters.langgraph import GraphRun
from agentfsm.adapters.openai_agents import AgentsRun
from agentfsm.adapters.pydantic_ai import AgentIterRun
from agentfsm.stores import MemoryEventStore
from tests.adapters._fake_openai import Fail, FakeOpenAI, Reply, fake_openai, loopback_only

__all__ = ["fake_openai", "loopback_only"]  # the fixtures, used by name

set_tracing_disabled(True)


def _types(store: MemoryEventStore) -> list[str]:
    return [e.type for e in store.events("r")]


def _agents(fake: FakeOpenAI, store: MemoryEventStore, **client: Any) -> Any:
    async def go() -> Any:
        async with AsyncOpenAI(base_url=fake.base_url, api_key="test", **client) as c:
            agent: Agent[Any] = Agent(
                name="a", model=OpenAIChatCompletionsModel(model="gpt-4.1", openai_client=c)
            )
            return await AgentsRun(store, "r").run(agent, "hi")

    return asyncio.run(go())


def _pydantic_ai(fake: FakeOpenAI, store: MemoryEventStore, **client: Any) -> Any:
    async def go() -> Any:
        async with AsyncOpenAI(base_url=fake.base_url, api_key="test", **client) as c:
            model = OpenAIChatModel("gpt-4.1", provider=OpenAIProvider(openai_client=c))
            return await AgentIterRun(store, "r").run(PydanticAgent(model), "hi")

    return asyncio.run(go())


def _langgraph(fake: FakeOpenAI, store: MemoryEventStore, **client: Any) -> Any:
    llm = ChatOpenAI(model="gpt-4.1", base_url=fake.base_url, api_key="test", **client)
    graph = StateGraph(MessagesState)
    graph.add_node("agent", lambda state: {"messages": [llm.invoke(state["messages"])]})
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return GraphRun(store, "r").run(graph.compile(), {"messages": [HumanMessage("hi")]})


DRIVERS = pytest.mark.parametrize(
    "drive", [_agents, _pydantic_ai, _langgraph], ids=["openai-agents", "pydantic-ai", "langgraph"]
)


@DRIVERS
def test_the_clients_default_retries_stand_behind_one_model_call(
    fake_openai: FakeOpenAI, drive: Any
) -> None:
    fake_openai.script += [Fail(500), Fail(500), Reply(text="hello")]
    store = MemoryEventStore()
    done = drive(fake_openai, store)
    assert done.status == "completed"
    assert len(fake_openai.requests) == 3  # three HTTP attempts...
    assert _types(store).count("model.started") == 1  # ...one model call for the guards


@DRIVERS
def test_with_max_retries_0_a_failed_attempt_ends_the_run_recorded(
    fake_openai: FakeOpenAI, drive: Any
) -> None:
    fake_openai.script += [Fail(500), Reply(text="hello")]
    store = MemoryEventStore()
    with pytest.raises(Exception, match="500"):
        drive(fake_openai, store, max_retries=0)
    assert len(fake_openai.requests) == 1
    assert _types(store)[-1] == "run.failed"
    assert "500" in (store.load("r").error.message if store.load("r").error else "")
