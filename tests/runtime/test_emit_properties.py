"""Determinism of a batch's proposed events: whatever order its calls end in, one record.

Under the `AsyncRunner` a batch's calls run at once and end in any order. The events they
propose are judged once the batch is resolved, in the batch's order, not the order the calls
ended: so the run comes out the same as the sync `Runner`'s, which runs them in turn, and
each proposal is applied at most once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.errors import RunNotFoundError
from agentfsm.events import step_clock
from agentfsm.record import RunRecord
from agentfsm.runtime import (
    Agent,
    AsyncRunner,
    Decision,
    Emit,
    ProposedCall,
    Runner,
    ScriptedModel,
    Tool,
    ToolContext,
)
from agentfsm.stores import MemoryEventStore, ThreadedAsyncEventStore
from tests.fixtures.emit_loan import loan_store

#: What a call of `act` proposes: nothing, a note (the run stays), the documents request
#: (the run then waits: later proposals are refused there), fields its type refuses, a type
#: the tool does not declare.
KINDS = ("none", "note", "docs", "bad", "rogue")


def proposed(kind: str, i: int) -> Emit | None:
    if kind == "note":
        return Emit("loan.noted", text=f"note {i}")
    if kind == "docs":
        return Emit("loan.documents_requested", documents=[f"doc {i}"])
    if kind == "bad":
        return Emit("loan.noted", text=i)
    if kind == "rogue":
        return Emit("loan.sent_to_underwriting", summary=f"{i}")
    return None


def batch(kinds: list[str]) -> ScriptedModel:
    calls = [ProposedCall("act", {"i": i, "kind": k}) for i, k in enumerate(kinds)]
    return ScriptedModel([Decision.call_tools(*calls), Decision.answer("done")])


DECLARED = ("loan.noted", "loan.documents_requested")


def sync_run(kinds: list[str]) -> MemoryEventStore:
    """The batch run in turn, in its own order, by the sync `Runner`."""
    store = loan_store()

    def act(ctx: ToolContext) -> Emit | None:
        return proposed(ctx.args["kind"], ctx.args["i"])

    tool = Tool("act", act, emits=DECLARED)
    Runner(store, Agent("loans", batch(kinds), [tool]), clock=step_clock()).run("r")
    return store


def async_run(kinds: list[str], order: list[int]) -> MemoryEventStore:
    """The batch run at once by the `AsyncRunner`, its calls ending in `order`: each call
    waits for its gate; the next gate opens once the call before it is recorded."""
    store = loan_store()

    async def main() -> None:
        gates = [asyncio.Event() for _ in kinds]

        async def act(ctx: ToolContext) -> Emit | None:
            await gates[ctx.args["i"]].wait()
            return proposed(ctx.args["kind"], ctx.args["i"])

        async def release() -> None:
            for i in order:
                gates[i].set()
                while not _done(store, f"t1.{i + 1}"):
                    await asyncio.sleep(0.002)

        tool = Tool("act", act, emits=DECLARED)
        runner = AsyncRunner(
            ThreadedAsyncEventStore(store), Agent("loans", batch(kinds), [tool]), clock=step_clock()
        )
        opener = asyncio.create_task(release())
        await runner.run("r")
        await opener

    asyncio.run(main())
    return store


def _done(store: MemoryEventStore, aid: str) -> bool:
    try:
        record = store.load("r")
    except RunNotFoundError:  # not started yet
        return False
    action = record.actions.get(aid)
    return action is not None and action.status == "succeeded"


def outcome(store: MemoryEventStore) -> tuple[Any, ...]:
    """What the batch came to: the run's state, what its events recorded, each call's
    proposal and its judgement, the lifecycle's events (with their sequences: all in the
    commit that resolved the batch), and the refusals (a proposal its type or the tool
    refuses is refused with its call's outcome, so where depends on when the call ended)."""
    record: RunRecord = store.load("r")
    calls = tuple(
        (a.action_id, a.status, a.emit, a.emitted, a.refusal) for a in record.actions.values()
    )
    events = list(store.events("r"))
    caused = tuple(
        (e.sequence, e.model_dump(mode="json", exclude={"occurred_at"}))
        for e in events
        if e.type.startswith("loan.")
    )
    refused = sorted(
        (e.action_id, e.refusal.model_dump_json()) for e in events if e.type == "emit.refused"
    )
    return (record.status, dict(record.custom), calls, caused, refused)


@settings(max_examples=25, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=5).flatmap(
        lambda ks: st.tuples(st.just(ks), st.permutations(range(len(ks))))
    )
)
def test_any_completion_order_gives_the_same_record(kinds: tuple[list[str], list[int]]) -> None:
    """Any subset of a batch's calls proposing events, any order of completion: the same
    record as the batch run in turn, and each proposal applied at most once."""
    which, order = kinds
    expected = outcome(sync_run(which))
    store = async_run(which, list(order))
    ended = [e.action_id for e in store.events("r") if e.type == "tool.completed"]
    assert ended == [f"t1.{i + 1}" for i in order]  # the calls did end in that order
    assert outcome(store) == expected
    for aid, _, _, emitted, refusal in expected[2]:
        caused = [e for e in store.events("r") if getattr(e, "emitted_by", None) is not None]
        mine = [e for e in caused if e.emitted_by.action_id == aid]
        assert len(mine) == (emitted is not None)
        assert not (emitted is not None and refusal is not None)
