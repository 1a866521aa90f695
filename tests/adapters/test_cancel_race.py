"""A run cancelled by one call while another starts its subagent ends that subagent too.

Found by the property test of the OpenAI Agents SDK adapter (rarely, in the whole suite):
a batch runs `hang_up` (which cancels the run from "another process") beside `ask` (an
agent tool). When the cancel landed while `ask` was starting its child run, the child was
left `running` (the cancel struck before the code that settles it), or `cancel_requested`
(a second cancel of the task struck between the request and `run.cancelled`). The scenario
is repeated: without the fix most attempts left a child open (28 of 40 measured).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import structlog

from agentfsm.runtime import cancel
from agentfsm.stores import MemoryEventStore
from tests.adapters._common import validates

# The SDK leaves a cancelled turn's coroutine unawaited, and says so.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

ENDED = {"cancelled", "completed", "failed", "terminated"}
ATTEMPTS = 12


def test_a_subagent_starting_while_its_caller_is_cancelled_ends(tmp_path: Path) -> None:
    """Every attempt: the caller is cancelled, its subagent run ended, both logs legal."""
    from agents import Agent, function_tool
    from agents.testing import assistant_message, function_call

    from agentfsm.adapters.openai_agents import AgentsRun
    from tests.adapters import _openai_agents_app as app

    store: list[MemoryEventStore] = []

    def hang_up(reason: str) -> str:
        """Cancel run r1 from "another process" while this call runs."""
        cancel(store[0], "r1", reason=reason)
        return "hung up"

    batch = [
        function_call("hang_up", {"reason": "c0"}, call_id="c0"),
        function_call("ask", {"input": "c1"}, call_id="c1"),
        function_call("get_weather", {"city": "Paris"}, call_id="c2"),
    ]
    outcomes: list[tuple[str, list[tuple[str, str]]]] = []
    with structlog.testing.capture_logs():
        for _ in range(ATTEMPTS):
            store[:] = [MemoryEventStore()]
            driver = AgentsRun(store[0], "r1")
            helper = Agent(name="helper", model=app.scripted([assistant_message("ok")]))
            tools: list[Any] = [
                app.get_weather,
                function_tool(hang_up),
                driver.agent_tool(helper, tool_name="ask"),
            ]
            model = app.scripted(batch, [assistant_message("done")])
            done = asyncio.run(driver.arun(Agent(name="support", model=model, tools=tools), "go"))
            children = [(i.run_id, i.status) for i in store[0].runs() if i.run_id != "r1"]
            outcomes.append((done.status, children))
            assert validates(store[0], "r1", tmp_path) == 0
            for run_id, _ in children:
                assert validates(store[0], run_id, tmp_path) == 0
    assert [(s, [c for c in kids if c[1] not in ENDED]) for s, kids in outcomes] == [
        ("cancelled", [])
    ] * ATTEMPTS

