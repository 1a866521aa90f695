"""Property: whatever an SDK's model asks for, the adapter's log is one our validator accepts.

Scripts of model turns are drawn (each a batch of calls that succeed, fail, need approval or
cancel the run from "another process", then a final answer); the SDK's real runner plays
them, approvals are decided as drawn and the run resumed from our store, until it ends. The
run ends completed (cancelled, if a call cancelled it; terminated at a drawn turn limit), the
log validates, and no action is left open.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("agents")
pytest.importorskip("pydantic_ai")

from agentfsm.adapters.stores import MemoryEventStore
from agentfsm.fsm import MaxTurns
from agentfsm.runtime import approve, cancel, reject
from tests.adapters._common import run, validates

KINDS = ("ok", "fail", "approval", "cancel")
#: Where a run's actions may end: resolved, or unknown when a cancel caught them in flight.
SETTLED = {"succeeded", "failed", "rejected", "unknown"}
#: The store the `hang_up` tools cancel run r1 in (set by each example).
STORE: list[MemoryEventStore] = []


def hang_up(reason: str) -> str:
    """Cancel run r1 from "another process" while this call runs."""
    cancel(STORE[0], "r1", reason=reason)
    return "hung up"


@st.composite
def scripts(draw: st.DrawFn) -> tuple[list[list[tuple[str, str]]], list[bool]]:
    """Up to three turns of one to three calls `(kind, call_id)`, and decisions to draw on."""
    ids = itertools.count()
    turns = [
        [
            (kind, f"c{next(ids)}")
            for kind in draw(st.lists(st.sampled_from(KINDS), min_size=1, max_size=3))
        ]
        for _ in range(draw(st.integers(0, 3)))
    ]
    return turns, draw(st.lists(st.booleans(), min_size=9, max_size=9))


def _decide(
    store: MemoryEventStore, run_id: str, pending: tuple[str, ...], votes: list[bool]
) -> None:
    for aid in pending:
        if votes.pop():
            approve(store, run_id, aid, approver="alice")
        else:
            reject(store, run_id, aid, approver="bob", reason="no")


def _guards(max_turns: int | None) -> list[Any]:
    return [] if max_turns is None else [MaxTurns(max_turns)]


def _check(
    store: MemoryEventStore,
    done: Any,
    turns: list[Any],
    tmp_path: Path,
    max_turns: int | None = None,
) -> None:
    cancels = any(kind == "cancel" for turn in turns for kind, _ in turn)
    if done.status == "terminated":  # only our turn limit may stop it, and only past it
        assert max_turns is not None
        assert done.stop_reason == "max_turns"
        assert done.record.turn == max_turns
    else:
        assert done.status == ("cancelled" if cancels else "completed")
    assert {a.status for a in done.record.actions.values()} <= SETTLED
    assert validates(store, "r1", tmp_path) == 0


SETTINGS = settings(
    max_examples=25,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(scripts(), st.none() | st.integers(1, 4))
def test_openai_agents_runs_always_log_legally(
    tmp_path: Path, drawn: Any, max_turns: int | None
) -> None:
    """Mixed batches, failures, approvals accepted or rejected: always a legal log."""
    from agents import Agent, function_tool
    from agents.testing import assistant_message, function_call

    from agentfsm.adapters.openai_agents import AgentsRun
    from tests.adapters import _openai_agents_app as app

    turns, votes = drawn

    def response(turn: list[tuple[str, str]]) -> list[Any]:
        out = []
        for kind, cid in turn:
            if kind == "approval":
                out.append(function_call("refund", {"order_id": cid}, call_id=cid))
            elif kind == "cancel":
                out.append(function_call("hang_up", {"reason": cid}, call_id=cid))
            else:
                city = "Atlantis" if kind == "fail" else cid
                out.append(function_call("get_weather", {"city": city}, call_id=cid))
        return out

    steps = [response(t) for t in turns] + [[assistant_message("done")]]

    def agent(remaining: list[Any]) -> Agent[Any]:
        model = app.scripted(*remaining)
        tools = [app.get_weather, app.refund, function_tool(hang_up)]
        return Agent(name="support", model=model, tools=tools)

    store = MemoryEventStore()
    STORE[:] = [store]
    current = agent(steps)
    guards = _guards(max_turns)
    done = run(AgentsRun(store, "r1", guards=guards).run(current, "go"))
    used = len(current.model.calls)  # type: ignore[union-attr]
    while done.status == "waiting_approval":
        _decide(store, "r1", done.record.pending_approvals, votes)
        current = agent(steps[used:])
        done = run(AgentsRun(store, "r1", guards=guards).resume(current))
        used += len(current.model.calls)  # type: ignore[union-attr]
    _check(store, done, turns, tmp_path, max_turns)


@SETTINGS
@given(scripts(), st.none() | st.integers(1, 4))
def test_pydantic_ai_runs_always_log_legally(
    tmp_path: Path, drawn: Any, max_turns: int | None
) -> None:
    """The same scripts through `agent.iter()`: retries, deferred approvals, always legal."""
    from pydantic_ai.exceptions import UnexpectedModelBehavior
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    from agentfsm.adapters.pydantic_ai import AgentIterRun
    from tests.adapters._pydantic_ai_app import USAGE, answer, make_agent

    turns, votes = drawn

    def response(turn: list[tuple[str, str]]) -> ModelResponse:
        parts = []
        for kind, cid in turn:
            if kind == "approval":
                parts.append(ToolCallPart("refund", {"order_id": cid}, tool_call_id=cid))
            elif kind == "cancel":
                parts.append(ToolCallPart("hang_up", {"reason": cid}, tool_call_id=cid))
            else:
                city = "Atlantis" if kind == "fail" else cid
                parts.append(ToolCallPart("get_weather", {"city": city}, tool_call_id=cid))
        return ModelResponse(parts=parts, usage=USAGE)

    agent = make_agent(*[response(t) for t in turns], answer("done"))
    agent.tool_plain(hang_up)
    store = MemoryEventStore()
    STORE[:] = [store]
    try:
        guards = _guards(max_turns)
        done = run(AgentIterRun(store, "r1", guards=guards).run(agent, "go"))
        while done.status == "waiting_approval":
            _decide(store, "r1", done.record.pending_approvals, votes)
            done = run(AgentIterRun(store, "r1", guards=guards).resume(agent))
    except UnexpectedModelBehavior as exc:
        gave_up = str(exc)  # the SDK gave up (a tool retried past its limit)
    else:
        _check(store, done, turns, tmp_path, max_turns)
        return
    record = store.load("r1")
    assert (record.status, record.error and record.error.message) == ("failed", gave_up)
    assert validates(store, "r1", tmp_path) == 0


@SETTINGS
@given(scripts(), st.booleans())
def test_langgraph_runs_always_log_legally(tmp_path: Path, drawn: Any, gated: bool) -> None:
    """A model + ToolNode graph, every call put to a person when `gated`: always legal."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver
    from structlog.testing import capture_logs

    from agentfsm.adapters.langgraph import GraphRun
    from tests.adapters import _langgraph_app as app

    turns, votes = drawn
    messages = [
        app.AIMessage(
            content="",
            tool_calls=[
                {
                    "name": "get_weather",
                    "args": {"city": "Atlantis" if kind == "fail" else cid},  # cancel: ok
                    "id": cid,
                    "type": "tool_call",
                }
                for kind, cid in turn
            ],
        )
        for turn in turns
    ]
    g = app.graph([*messages, app.answer("done")], approval=gated, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    store = MemoryEventStore()
    with capture_logs():
        done = GraphRun(store, "r1").run(g, {"messages": [HumanMessage("go")]}, config)
        while done.status == "waiting_approval":
            _decide(store, "r1", done.record.pending_approvals, votes)
            done = GraphRun(store, "r1").resume(g, config)
    _check(store, done, [[("ok", "")]], tmp_path)
