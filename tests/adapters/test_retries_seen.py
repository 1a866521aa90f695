"""Every HTTP attempt of a model call is one for the guards, and in the log (issue 31, item 3).

Each SDK's real client talks HTTP to the fake OpenAI API on 127.0.0.1, which answers 500 (or
drops the connection) before it answers. The `openai` client under each SDK retries inside
what the SDK sees as one model call; each adapter records every attempt as a call of its own
(`agentfsm.adapters._attempts`): a failed one is `model.failed`, the retry the next
`model.started`, which the guards judge before the request is sent. So a deadline passed
during the backoff, `max_turns`, a budget that cannot tell what a lost attempt spent, and a
cancel asked meanwhile each stop the run before the retry; and the client's own
`max_retries` still bounds the attempts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from agents import (
    Agent,
    ModelRetrySettings,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    retry_policies,
    set_tracing_disabled,
)
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
from agentfsm.events.models import Limits
from agentfsm.runtime import cancel
from agentfsm.stores import MemoryEventStore
from tests.adapters._fake_openai import (
    Call,
    Drop,
    Fail,
    FakeOpenAI,
    Reply,
    fake_openai,
    loopback_only,
)

__all__ = ["fake_openai", "loopback_only"]  # the fixtures, used by name

set_tracing_disabled(True)

#: A 500 the client retries at once (the fake server says when: `retry-after-ms`).
E500 = Fail(500, retry_after_ms=1)
T0 = datetime(2026, 9, 1, 10, 0, tzinfo=UTC)


def _types(store: MemoryEventStore) -> list[str]:
    return [e.type for e in store.events("r")]


def _agents(responses: bool = False) -> Callable[..., Any]:
    def drive(
        fake: FakeOpenAI,
        store: MemoryEventStore,
        *,
        client: dict[str, Any] | None = None,
        limits: Limits | None = None,
        config: RunConfig | None = None,
        **options: Any,
    ) -> Any:
        async def go() -> Any:
            async with AsyncOpenAI(base_url=fake.base_url, api_key="test", **(client or {})) as c:
                model = (
                    OpenAIResponsesModel(model="gpt-4.1", openai_client=c)
                    if responses
                    else OpenAIChatCompletionsModel(model="gpt-4.1", openai_client=c)
                )
                agent: Agent[Any] = Agent(name="a", model=model)
                kwargs = {"run_config": config} if config is not None else {}
                return await AgentsRun(store, "r", **options).arun(
                    agent, "hi", limits=limits, **kwargs
                )

        return asyncio.run(go())

    return drive


def _pydantic_ai(
    fake: FakeOpenAI,
    store: MemoryEventStore,
    *,
    client: dict[str, Any] | None = None,
    limits: Limits | None = None,
    **options: Any,
) -> Any:
    async def go() -> Any:
        async with AsyncOpenAI(base_url=fake.base_url, api_key="test", **(client or {})) as c:
            model = OpenAIChatModel("gpt-4.1", provider=OpenAIProvider(openai_client=c))
            return await AgentIterRun(store, "r", **options).arun(
                PydanticAgent(model), "hi", limits=limits
            )

    return asyncio.run(go())


def _graph(llm: ChatOpenAI, sync: bool) -> Any:
    graph = StateGraph(MessagesState)
    if sync:
        graph.add_node("agent", lambda state: {"messages": [llm.invoke(state["messages"])]})
    else:

        async def agent(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await llm.ainvoke(state["messages"])]}

        graph.add_node("agent", agent)
    graph.add_edge(START, "agent")
    graph.add_edge("agent", END)
    return graph.compile()


def _langgraph(sync: bool) -> Callable[..., Any]:
    def drive(
        fake: FakeOpenAI,
        store: MemoryEventStore,
        *,
        client: dict[str, Any] | None = None,
        limits: Limits | None = None,
        **options: Any,
    ) -> Any:
        llm = ChatOpenAI(model="gpt-4.1", base_url=fake.base_url, api_key="test", **(client or {}))
        graph, run = _graph(llm, sync), GraphRun(store, "r", **options)
        given = {"messages": [HumanMessage("hi")]}
        if sync:
            return run.run(graph, given, limits=limits)
        return asyncio.run(run.arun(graph, given, limits=limits))

    return drive


DRIVERS = pytest.mark.parametrize(
    "drive",
    [_agents(), _agents(responses=True), _pydantic_ai, _langgraph(True), _langgraph(False)],
    ids=[
        "openai-agents-chat",
        "openai-agents-responses",
        "pydantic-ai",
        "langgraph",
        "langgraph-async",
    ],
)


def _after_first_request(fake: FakeOpenAI, later: timedelta) -> Callable[[], datetime]:
    """A clock at `T0` until the fake server has answered a request, `later` after from then."""
    return lambda: T0 + later if fake.requests else T0


@DRIVERS
def test_each_attempt_is_a_model_call_of_its_own(fake_openai: FakeOpenAI, drive: Any) -> None:
    """500, 500, 200: three HTTP attempts, three model calls, each reserving, the failed two
    ended by `model.failed` saying what the server answered; the run completes."""
    fake_openai.script += [E500, E500, Reply(text="hello")]
    store = MemoryEventStore()
    done = drive(fake_openai, store, reserve_tokens=100)
    assert done.status == "completed"
    assert len(fake_openai.requests) == 3
    assert _types(store) == [
        "run.started",
        *["model.started", "model.failed"] * 2,
        "model.started",
        "model.completed",
        "run.completed",
    ]
    events = list(store.events("r"))
    assert [e.reserved_tokens for e in events if e.type == "model.started"] == [100, 100, 100]
    failed = [e.error for e in events if e.type == "model.failed"]
    assert [(f.kind, f.retryable) for f in failed] == [("http_500", True)] * 2
    assert failed[0].message == "HTTP 500 Internal Server Error: scripted failure"
    assert done.record.turn == 3
    assert done.record.usage.input_tokens == 40  # the answer's; the failed attempts reported none


@DRIVERS
def test_a_deadline_passed_during_the_backoff_stops_the_run_before_the_retry(
    fake_openai: FakeOpenAI, drive: Any
) -> None:
    """The first attempt fails; by the time the client retries, the deadline has passed: the
    retry's `model.started` is refused, its request never sent."""
    fake_openai.script += [E500, Reply(text="hello")]
    store = MemoryEventStore()
    clock = _after_first_request(fake_openai, timedelta(hours=2))
    limits = Limits(deadline=(T0 + timedelta(hours=1)).isoformat())
    done = drive(fake_openai, store, limits=limits, clock=clock)
    assert len(fake_openai.requests) == 1
    assert _types(store) == ["run.started", "model.started", "model.failed", "run.terminated"]
    assert done.status == "terminated"
    assert done.stop_reason == "deadline"


@DRIVERS
def test_max_turns_counts_attempts(fake_openai: FakeOpenAI, drive: Any) -> None:
    """Each attempt is a turn: under `max_turns=2` the client's third attempt is refused."""
    fake_openai.script += [E500, E500, Reply(text="hello")]
    store = MemoryEventStore()
    done = drive(fake_openai, store, max_turns=2)
    assert len(fake_openai.requests) == 2
    assert (done.status, done.stop_reason) == ("terminated", "max_turns")
    assert done.record.stop_detail == "2 of 2 turns used"
    assert _types(store)[-2:] == ["model.failed", "run.terminated"]


@DRIVERS
def test_an_attempt_lost_after_sending_stops_a_budgeted_run_before_the_retry(
    fake_openai: FakeOpenAI, drive: Any
) -> None:
    """A dropped connection after the request went out may have cost tokens nobody reports:
    under a token limit the run stops (`budget`, usage missing) instead of retrying."""
    fake_openai.script += [Drop(), Reply(text="hello")]
    store = MemoryEventStore()
    done = drive(fake_openai, store, limits=Limits(max_tokens=10_000))
    assert len(fake_openai.requests) == 1
    assert _types(store) == ["run.started", "model.started", "model.failed", "run.terminated"]
    failed = list(store.events("r"))[2]
    assert (failed.error.kind, failed.error.retryable) == ("RemoteProtocolError", True)
    assert failed.error.message.startswith("no answer after its request was sent: ")
    assert (done.status, done.stop_reason) == ("terminated", "budget")
    assert done.record.stop_detail == (
        "usage missing: attempt 1 of the model call got no usable answer after its request "
        "was sent, so what it spent is unknown and max_tokens 10,000 cannot be checked; the "
        "client's retry was not sent (docs/adapters.md, 'Retries')"
    )


@pytest.mark.parametrize(
    "drive", [_agents(), _langgraph(True)], ids=["openai-agents-chat", "langgraph"]
)
def test_without_a_budget_a_lost_attempt_is_retried(fake_openai: FakeOpenAI, drive: Any) -> None:
    """No limit to check: the dropped attempt is recorded and the client's retry answers."""
    fake_openai.script += [Drop(), Reply(text="hello")]
    store = MemoryEventStore()
    done = drive(fake_openai, store)
    assert done.status == "completed"
    assert _types(store)[1:4] == ["model.started", "model.failed", "model.started"]


@DRIVERS
def test_the_clients_max_retries_bounds_the_attempts(fake_openai: FakeOpenAI, drive: Any) -> None:
    """Three 500s exhaust the default `max_retries=2`: three failed attempts, then the run
    fails with the SDK's error, naming the status."""
    fake_openai.script += [E500, E500, E500, Reply(text="never")]
    store = MemoryEventStore()
    with pytest.raises(Exception, match="500"):
        drive(fake_openai, store)
    assert len(fake_openai.requests) == 3
    assert _types(store) == ["run.started", *["model.started", "model.failed"] * 3, "run.failed"]


@DRIVERS
def test_with_max_retries_0_one_failed_attempt_fails_the_run(
    fake_openai: FakeOpenAI, drive: Any
) -> None:
    """The user's client setting is kept: one attempt, recorded, and the run fails."""
    fake_openai.script += [Fail(400), Reply(text="hello")]
    store = MemoryEventStore()
    with pytest.raises(Exception, match="400"):
        drive(fake_openai, store, client={"max_retries": 0})
    assert len(fake_openai.requests) == 1
    assert _types(store) == ["run.started", "model.started", "model.failed", "run.failed"]
    failed = list(store.events("r"))[2].error
    assert (failed.kind, failed.retryable) == ("http_400", False)


@DRIVERS
def test_a_cancel_asked_during_the_backoff_ends_the_run_before_the_retry(
    fake_openai: FakeOpenAI, drive: Any
) -> None:
    """Another process asks to cancel while the first attempt fails: the failure is still
    recorded, the retry is not sent, and the run ends cancelled."""
    store = MemoryEventStore()
    fake_openai.script += [E500, Reply(text="hello")]
    fake_openai.on_request = lambda n: cancel(store, "r", reason="stop it") if n == 1 else None
    done = drive(fake_openai, store)
    assert len(fake_openai.requests) == 1
    assert done.status == "cancelled"
    assert _types(store)[1:] == [
        "model.started",
        "run.cancel_requested",
        "model.failed",
        "run.cancelled",
    ]


def test_the_agents_sdks_own_retries_are_attempts_too(fake_openai: FakeOpenAI) -> None:
    """The Agents SDK's runner-managed retry (`ModelSettings(retry=...)`, with the client's
    off) sends the model request again inside one `on_llm_start`: each is a call."""
    fake_openai.script += [Fail(500), Reply(text="hello")]
    store = MemoryEventStore()
    retry = ModelRetrySettings(
        max_retries=2,
        backoff={"initial_delay": 0.001, "max_delay": 0.001, "jitter": False},
        policy=retry_policies.http_status([500]),
    )
    config = RunConfig(model_settings=ModelSettings(retry=retry))
    done = _agents()(fake_openai, store, client={"max_retries": 0}, config=config)
    assert done.status == "completed"
    assert len(fake_openai.requests) == 2
    assert _types(store)[1:5] == [
        "model.started",
        "model.failed",
        "model.started",
        "model.completed",
    ]


def test_a_subagents_attempts_are_the_subagents(fake_openai: FakeOpenAI) -> None:
    """An `agent_tool` child's request fails once: the child's run records both attempts,
    the caller's run holds its own two model calls only."""
    fake_openai.script += [
        Reply(calls=(Call("c1", "helper", {"input": "look it up"}),)),
        E500,
        Reply(text="found it"),
        Reply(text="done"),
    ]
    store = MemoryEventStore()

    async def go() -> Any:
        async with AsyncOpenAI(base_url=fake_openai.base_url, api_key="test") as c:
            model = OpenAIChatCompletionsModel(model="gpt-4.1", openai_client=c)
            run = AgentsRun(store, "r")
            helper: Agent[Any] = Agent(name="helper", model=model)
            agent: Agent[Any] = Agent(
                name="a", model=model, tools=[run.agent_tool(helper, tool_name="helper")]
            )
            return await run.arun(agent, "hi")

    done = asyncio.run(go())
    assert done.status == "completed"
    assert len(fake_openai.requests) == 4
    child = [e.type for e in store.events("r/c1")]
    assert child[1:5] == ["model.started", "model.failed", "model.started", "model.completed"]
    assert _types(store).count("model.started") == 2
    assert "model.failed" not in _types(store)


def test_outside_a_run_the_client_is_untouched(fake_openai: FakeOpenAI) -> None:
    """After runs were driven (the wrapper is installed, once), a client used outside any
    run retries as it always did, and nothing is recorded anywhere."""
    from openai._base_client import AsyncAPIClient

    for _ in range(2):
        fake_openai.script += [Reply(text="hello")]
        _pydantic_ai(fake_openai, MemoryEventStore())
    wrapped = AsyncAPIClient.__dict__["_send_request"]
    assert getattr(wrapped, "__agentfsm_attempts__", False)
    assert not getattr(wrapped.__wrapped__, "__agentfsm_attempts__", False)
    fake_openai.script += [E500, Reply(text="plain")]

    async def plain() -> str | None:
        async with AsyncOpenAI(base_url=fake_openai.base_url, api_key="test") as c:
            answer = await c.chat.completions.create(model="gpt-4.1", messages=[])
            return answer.choices[0].message.content

    assert asyncio.run(plain()) == "plain"
    assert len(fake_openai.requests) == 4
