"""Issue 31 against the OpenAI Agents SDK's real client: limits never silently stop working.

Each test drives `AgentsRun` over the SDK's `OpenAIChatCompletionsModel` /
`OpenAIResponsesModel` and a real `AsyncOpenAI` client talking HTTP to the fake OpenAI API on
127.0.0.1 (`_fake_openai`), streamed and not.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    RunConfig,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from structlog.testing import capture_logs

from agentfsm.adapters.openai_agents import AgentsRun, UnknownModelError, price_table
from agentfsm.events import Limits
from agentfsm.runtime._metering import MISSING_USAGE
from agentfsm.stores import MemoryEventStore
from tests.adapters._fake_openai import FakeOpenAI, Reply, fake_openai, loopback_only

__all__ = ["fake_openai", "loopback_only"]  # the fixtures, used by name

set_tracing_disabled(True)

APIS = ("chat", "responses")


#: The clients a test made: closed on the loop that used them, as the test's run ends.
_CLIENTS: list[AsyncOpenAI] = []


def _client(fake: FakeOpenAI, **kwargs: Any) -> AsyncOpenAI:
    client = AsyncOpenAI(base_url=fake.base_url, api_key="test", **{"max_retries": 0, **kwargs})
    _CLIENTS.append(client)
    return client


def _agent(fake: FakeOpenAI, api: str, settings: ModelSettings | None = None) -> Agent[Any]:
    client = _client(fake)
    cls = OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel
    model = cls(model="gpt-4.1", openai_client=client)
    return Agent(name="a", model=model, model_settings=settings or ModelSettings())


def _run(run: AgentsRun, agent: Agent[Any], stream: bool, **kwargs: Any) -> Any:
    if stream:
        kwargs["on_stream_event"] = lambda event: None

    async def go() -> Any:
        try:
            return await run.arun(agent, "hi", **kwargs)
        finally:
            while _CLIENTS:
                await _CLIENTS.pop().close()

    return asyncio.run(go())


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_token_limit_trips_on_every_api_streamed_or_not(
    fake_openai: FakeOpenAI, api: str, stream: bool
) -> None:
    """The server reports 60 tokens; a 25-token limit stops the run on each API."""
    fake_openai.script.append(Reply(text="hello", input_tokens=40, output_tokens=20))
    store = MemoryEventStore()
    with capture_logs() as lines:
        done = _run(
            AgentsRun(store, "r"), _agent(fake_openai, api), stream, limits=Limits(max_tokens=25)
        )
    assert (done.status, done.stop_reason) == ("terminated", "budget")
    assert done.record.usage.input_tokens == 40
    assert done.record.usage.output_tokens == 20
    assert done.record.stop_detail == "spent 60 > 25 tokens"
    if api == "chat" and stream:
        # Asked for on the user's behalf, and said so.
        assert fake_openai.requests[0][1]["stream_options"] == {"include_usage": True}
        asked = [line for line in lines if line["event"] == "usage.requested"]
        assert asked
        assert asked[0]["setting"] == "ModelSettings(include_usage=True)"


def test_no_usage_is_asked_for_without_a_budget(fake_openai: FakeOpenAI) -> None:
    fake_openai.script.append(Reply(text="hello"))
    done = _run(AgentsRun(MemoryEventStore(), "r"), _agent(fake_openai, "chat"), True)
    assert done.status == "completed"
    assert "stream_options" not in fake_openai.requests[0][1]


@pytest.mark.parametrize("api", APIS)
def test_an_answer_without_usage_stops_a_budgeted_run(fake_openai: FakeOpenAI, api: str) -> None:
    """The server omits usage (or the user said include_usage=False): the run stops, naming it."""
    fake_openai.script.append(Reply(text="hello", usage=False))
    settings = ModelSettings(include_usage=False)
    store = MemoryEventStore()
    done = _run(
        AgentsRun(store, "r"),
        _agent(fake_openai, api, settings),
        True,
        limits=Limits(max_tokens=1_000),
    )
    assert (done.status, done.stop_reason) == ("terminated", "budget")
    assert done.record.stop_detail.startswith(MISSING_USAGE)
    assert "max_tokens 1,000" in done.record.stop_detail
    assert done.partial_output == "hello"
    completed = [e for e in store.events("r") if e.type == "model.completed"]
    assert completed[0].usage is None  # the log says it: no usage, not 0 tokens


def test_a_reservation_alone_also_needs_usage(fake_openai: FakeOpenAI) -> None:
    fake_openai.script.append(Reply(text="hello", usage=False))
    done = _run(
        AgentsRun(MemoryEventStore(), "r", reserve_tokens=100),
        _agent(fake_openai, "responses"),
        False,
    )
    assert (done.status, done.stop_reason) == ("terminated", "budget")
    assert "the call's reservation" in done.record.stop_detail


def test_without_a_budget_a_missing_usage_is_recorded_as_missing(fake_openai: FakeOpenAI) -> None:
    fake_openai.script.append(Reply(text="hello", usage=False))
    store = MemoryEventStore()
    done = _run(AgentsRun(store, "r"), _agent(fake_openai, "chat"), False)
    assert done.status == "completed"
    assert [e.usage for e in store.events("r") if e.type == "model.completed"] == [None]


@pytest.mark.parametrize("api", APIS)
def test_pricing_sees_the_model_objects_name(fake_openai: FakeOpenAI, api: str) -> None:
    fake_openai.script.append(Reply(text="hello", input_tokens=1_000_000, output_tokens=0))
    seen: list[str | None] = []

    def pricing(model: str | None, tokens_in: int, tokens_out: int) -> float:
        seen.append(model)
        return 2.0

    done = _run(
        AgentsRun(MemoryEventStore(), "r", pricing=pricing), _agent(fake_openai, api), False
    )
    assert seen == ["gpt-4.1"]
    assert done.record.usage.cost == 2.0


def test_run_config_model_is_the_one_priced(fake_openai: FakeOpenAI) -> None:
    fake_openai.script.append(Reply(text="hello"))
    seen: list[str | None] = []
    client = _client(fake_openai)
    override = OpenAIChatCompletionsModel(model="gpt-4.1-mini", openai_client=client)
    _run(
        AgentsRun(MemoryEventStore(), "r", pricing=lambda m, i, o: seen.append(m) or 0.0),
        _agent(fake_openai, "chat"),
        False,
        run_config=RunConfig(model=override),
    )
    assert seen == ["gpt-4.1-mini"]


def test_a_model_the_price_table_lacks_is_an_error_under_a_cost_limit(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script.append(Reply(text="hello"))
    prices = price_table({"gpt-4o": (2.5, 10.0)})
    run = AgentsRun(MemoryEventStore(), "r", pricing=prices)
    with pytest.raises(UnknownModelError, match=r"no price for model 'gpt-4\.1'.*'gpt-4o'"):
        _run(run, _agent(fake_openai, "responses"), False, limits=Limits(max_cost=1.0))
    record = run.recorder.store.load("r")
    assert record.status == "failed"
    assert record.error is not None
    assert "no price for model 'gpt-4.1'" in record.error.message


def test_without_a_cost_limit_an_unpriced_model_leaves_the_cost_out(
    fake_openai: FakeOpenAI,
) -> None:
    fake_openai.script.append(Reply(text="hello"))
    run = AgentsRun(MemoryEventStore(), "r", pricing=price_table({"gpt-4o": (2.5, 10.0)}))
    with capture_logs() as lines:
        done = _run(run, _agent(fake_openai, "chat"), False)
    assert done.status == "completed"
    assert [line["model"] for line in lines if line["event"] == "usage.unpriced"] == ["gpt-4.1"]


def test_a_dated_snapshot_reads_its_models_price() -> None:
    prices = price_table({"gpt-4.1": (2.0, 8.0), "gpt-4.1-mini": (0.4, 1.6)})
    assert prices("gpt-4.1-2025-04-14", 1_000_000, 0) == 2.0
    assert prices("gpt-4.1-mini-2025-04-14", 1_000_000, 0) == 0.4
    with pytest.raises(UnknownModelError, match="names no model"):
        prices(None, 1, 1)
