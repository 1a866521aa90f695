"""Both runners put a subagent tree's budget back the same way on resume (one implementation).

`AsyncRunner` once rebuilt the tree with its own copy of `recovery.rebuild_tree`, without its
rule that a call still proposed (or waiting for approval) never ran: a run that merely bore
such a call's child id was charged to the parent's shared budget, and stopped the parent.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentfsm.events import Limits, Usage, step_clock
from agentfsm.runtime import (
    Agent,
    AsyncRunner,
    Decision,
    ProposedCall,
    Runner,
    ScriptedModel,
    Tool,
    ToolPolicy,
    approve,
    subagent,
)
from agentfsm.stores import MemoryEventStore, MemoryStorage, ThreadedAsyncEventStore


def _parent() -> Agent:
    helper = Agent("helper", ScriptedModel([Decision.answer("helped")]))
    script = ScriptedModel(
        [
            # `task` must not be empty: the delegation is invalid and never runs; the charge
            # waits for a person, so the delegation stays proposed until then.
            Decision.call_tools(
                ProposedCall("delegate", {"task": ""}),
                ProposedCall("charge"),
                usage=Usage(input_tokens=10),
            ),
            Decision.answer("done", usage=Usage(input_tokens=10)),
        ]
    )
    return Agent(
        "main",
        script,
        tools=[subagent("delegate", helper), Tool("charge", lambda ctx: "charged")],
        policy=ToolPolicy(approval={"charge"}),
    )


def _stale(storage: MemoryStorage) -> None:
    """A run that bears the proposed delegation's child id, having spent a lot."""
    big = Agent("other", ScriptedModel([Decision.answer("x", usage=Usage(input_tokens=5000))]))
    Runner(MemoryEventStore(storage), big, clock=step_clock()).run("p/t1.1", "unrelated")


def test_sync_runner_does_not_charge_a_run_bearing_a_proposed_calls_id() -> None:
    """Resumed after the approval, the parent completes within its own budget."""
    storage = MemoryStorage()
    store = MemoryEventStore(storage)
    runner = Runner(store, _parent(), clock=step_clock())
    assert runner.run("p", "go", limits=Limits(max_tokens=1000)).status == "waiting_approval"
    _stale(storage)
    approve(store, "p", "t1.2")
    assert runner.drive("p").status == "completed"


def test_async_runner_does_not_charge_a_run_bearing_a_proposed_calls_id() -> None:
    """The same under `AsyncRunner`: the stale run is not the proposed call's child."""
    storage = MemoryStorage()
    store = ThreadedAsyncEventStore(MemoryEventStore(storage))
    runner = AsyncRunner(store, _parent(), clock=step_clock())

    async def go() -> Any:
        first = await runner.run("p", "go", limits=Limits(max_tokens=1000))
        assert first.status == "waiting_approval"
        _stale(storage)
        approve(MemoryEventStore(storage), "p", "t1.2")
        return await runner.drive("p")

    result = asyncio.run(go())
    assert result.status == "completed", (result.status, result.record.stop_detail)
