"""Resuming a run that already ended returns its result, as `Runner.drive` does, everywhere.

Nothing runs and nothing is appended: the ended run's record comes back, with its final
output when it completed. (Kept apart from the per-SDK files, which are being folded into
one scenario suite; this is one scenario over every adapter and the Runner.)
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from agentfsm import Agent as OurAgent
from agentfsm import Decision, Runner, ScriptedModel
from agentfsm.runtime import RunOutcome
from agentfsm.stores import MemoryEventStore
from tests.adapters._common import run

pytest.importorskip("agents")
pytest.importorskip("pydantic_ai")
pytest.importorskip("langgraph")


def _again(store: MemoryEventStore, first: RunOutcome, second: RunOutcome) -> None:
    """The second call returns what the first ended with, and appends nothing."""
    assert (second.status, second.final_output) == ("completed", first.final_output)
    assert (second.record, second.partial_output) == (store.load("r1"), None)
    assert (second.waiting, second.unknown_outcomes) == (False, ())


def test_the_runner_returns_an_ended_run() -> None:
    """The reference behaviour: `Runner.drive` of a completed run returns its result."""
    store = MemoryEventStore()
    runner = Runner(store, OurAgent("a", ScriptedModel([Decision.answer("Done.")])))
    first = runner.run("r1")
    _again(store, first, runner.drive("r1"))


def test_openai_agents_drive_of_an_ended_run_returns_it() -> None:
    """`AgentsRun.resume` of a completed run returns it; it needs no saved state."""
    from agents import Agent
    from agents.testing import assistant_message

    from agentfsm.adapters.openai_agents import AgentsRun
    from tests.adapters import _openai_agents_app as app

    store = MemoryEventStore()
    agent = Agent(name="weather", model=app.scripted([assistant_message("Sunny.")]))
    first = run(AgentsRun(store, "r1").arun(agent, "weather?"))
    _again(store, first, run(AgentsRun(store, "r1").adrive(agent)))


def test_pydantic_ai_drive_of_an_ended_run_returns_it() -> None:
    """`AgentIterRun.resume` of a completed run returns it (it used to say 'never paused')."""
    from agentfsm.adapters.pydantic_ai import AgentIterRun
    from tests.adapters._pydantic_ai_app import answer, make_agent

    store = MemoryEventStore()
    agent = make_agent(answer("Sunny."))
    first = run(AgentIterRun(store, "r1").arun(agent, "weather?"))
    _again(store, first, run(AgentIterRun(store, "r1").adrive(agent)))


def test_langgraph_drive_of_an_ended_run_returns_it() -> None:
    """`GraphRun.resume` of a completed run returns it without streaming the graph again."""
    from agentfsm.adapters.langgraph import GraphRun
    from tests.adapters._langgraph_app import answer, graph

    store = MemoryEventStore()
    g: Any = graph([answer("Sunny.")], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    ask = {"messages": [HumanMessage("weather?")]}
    first = blocking(lambda: GraphRun(store, "r1").run(g, ask, config))
    _again(store, first, blocking(lambda: GraphRun(store, "r1").drive(g, config)))


def blocking(call: Any) -> Any:
    """Call with the transition logs captured (they are not what is tested here)."""
    from structlog.testing import capture_logs

    with capture_logs():
        return call()
