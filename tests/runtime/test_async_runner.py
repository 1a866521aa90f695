"""AsyncRunner: concurrent batches, concurrency keys, cancel with a grace period, timeouts."""

from __future__ import annotations

import asyncio
from typing import Any

import attrs
import pytest

from agentfsm.events import step_clock
from agentfsm.runtime import (
    Agent,
    AsyncRunner,
    Decision,
    ProposedCall,
    RunnerConfig,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolPolicy,
    aapprove,
    cancel,
)
from agentfsm.stores import MemoryEventStore, MemoryStorage, ThreadedAsyncEventStore

from .helpers import Calls, Crash, order_script, order_tools, types, validate


@attrs.define
class Together:
    """Tools that each wait until `n` calls are in flight at once (so only a concurrent
    batch can finish; a safety timeout turns a sequential one into a failure, not a hang)."""

    n: int
    active: int = 0
    peak: int = 0
    order: list[str] = attrs.field(factory=list)
    all_in: asyncio.Event = attrs.field(factory=asyncio.Event)

    async def enter(self, name: str) -> None:
        self.active += 1
        self.peak = max(self.peak, self.active)
        self.order.append(f"start {name}")
        if self.active >= self.n:
            self.all_in.set()

    async def leave(self, name: str) -> None:
        self.order.append(f"end {name}")
        self.active -= 1

    def tool(self, name: str, key: str | None = None, wait: bool = True) -> Tool:
        async def fn(ctx: ToolContext) -> Any:
            await self.enter(ctx.action_id)
            if wait:
                await asyncio.wait_for(self.all_in.wait(), 5)
            else:
                for _ in range(3):
                    await asyncio.sleep(0)
            await self.leave(ctx.action_id)
            return ctx.action_id

        return Tool(name, fn, side_effects=False, concurrency_key=key)


async def _sleep(seconds: float) -> None:
    return None


def _runner(store: MemoryEventStore, model: Any, tools: list[Tool], **kw: Any) -> AsyncRunner:
    return AsyncRunner(
        ThreadedAsyncEventStore(store),
        Agent("support", model, tools, kw.pop("policy", ToolPolicy())),
        clock=step_clock(),
        sleep=_sleep,
        **kw,
    )


def test_runs_the_order_ticket_run() -> None:
    """The same path as the sync Runner, through a threaded store."""
    store, calls = MemoryEventStore(), Calls()
    result = asyncio.run(_runner(store, order_script(), order_tools(calls)).run("r1"))
    assert (result.status, result.final_output) == ("completed", "Opened ticket T-9001.")
    assert len(types(store, "r1")) == 14
    assert validate(store, ["r1"]).ok


def test_a_batch_runs_concurrently() -> None:
    """Three calls of one batch are in flight together; the model waits for all three."""
    overlap = Together(3)
    model = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("a"), ProposedCall("b"), ProposedCall("c")),
            lambda ctx: Decision.answer(sorted(a.result for a in ctx.results)),
        ]
    )
    tools = [overlap.tool("a"), overlap.tool("b"), overlap.tool("c")]
    store = MemoryEventStore()
    result = asyncio.run(_runner(store, model, tools).run("r1"))
    assert overlap.peak == 3
    assert result.final_output == ["t1.1", "t1.2", "t1.3"]
    assert validate(store, ["r1"]).ok


def test_calls_sharing_a_concurrency_key_never_overlap() -> None:
    """Same key: one after another in batch order; a call without a key runs beside them."""
    overlap = Together(2)
    model = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("acct"), ProposedCall("acct"), ProposedCall("other")),
            Decision.answer(""),
        ]
    )
    keyed = overlap.tool("acct", key="account-7")
    free = overlap.tool("other", wait=False)
    asyncio.run(_runner(MemoryEventStore(), model, [keyed, free]).run("r1"))
    keyed_events = [e for e in overlap.order if e.split()[1] in ("t1.1", "t1.2")]
    assert keyed_events == ["start t1.1", "end t1.1", "start t1.2", "end t1.2"]
    assert overlap.peak == 2


def test_a_cancel_during_calls_in_flight_settles_them_as_unknown() -> None:
    """Noticed by polling; after the grace period the calls still out are `outcome_unknown`."""
    storage = MemoryStorage()
    both = Together(2)
    never = asyncio.Event()

    async def stuck(ctx: ToolContext) -> Any:
        await both.enter(ctx.action_id)
        await asyncio.wait_for(both.all_in.wait(), 5)
        if ctx.action_id == "t1.1":
            await asyncio.to_thread(cancel, MemoryEventStore(storage), ctx.run_id, reason="stop")
        await never.wait()

    model = ScriptedModel([Decision.call_tools(ProposedCall("stuck"), ProposedCall("stuck"))])
    config = RunnerConfig(cancel_grace=0, cancel_poll=0.01)
    store = MemoryEventStore(storage)
    result = asyncio.run(_runner(store, model, [Tool("stuck", stuck)], config=config).run("r1"))
    assert result.status == "cancelled"
    assert [a.action_id for a in result.unknown_outcomes] == ["t1.1", "t1.2"]
    assert types(store, "r1")[-3:] == [
        "tool.outcome_unknown",
        "tool.outcome_unknown",
        "run.cancelled",
    ]
    assert validate(store, ["r1"]).ok


@pytest.mark.parametrize(
    ("side_effects", "status", "detail"),
    [
        (True, "unknown", "no answer within 0.01 s"),
        (False, "failed", "no answer within 0.01 s"),
    ],
)
def test_a_call_past_its_timeout_is_unknown_or_a_retryable_failure(
    side_effects: bool, status: str, detail: str
) -> None:
    """With side effects nobody knows what happened; without, it is a retryable `timeout`."""

    async def slow(ctx: ToolContext) -> Any:
        await asyncio.Event().wait()

    tool = Tool("slow", slow, side_effects=side_effects, timeout=0.01)
    model = ScriptedModel([Decision.call_tools(ProposedCall("slow")), Decision.answer("")])
    result = asyncio.run(_runner(MemoryEventStore(), model, [tool]).run("r1"))
    action = result.record.actions["t1.1"]
    assert action.status == status
    assert (action.reason if side_effects else action.error and action.error.message) == detail


def test_plain_tools_run_on_threads_and_approved_calls_are_driven_on() -> None:
    """A sync tool under the AsyncRunner; `aapprove` then `drive` runs the approved call."""
    calls = Calls()
    store = MemoryEventStore()
    runner = _runner(
        store, order_script(), order_tools(calls), policy=ToolPolicy(approval={"create_ticket"})
    )

    async def scenario() -> str:
        first = await runner.run("r1")
        assert first.status == "waiting_approval"
        await aapprove(runner.store, "r1", "t2.1", "alice")
        return (await runner.drive("r1")).status

    assert asyncio.run(scenario()) == "completed"
    assert calls.tools() == ["get_order", "create_ticket"]


def test_a_parent_cancelled_while_its_child_waits_ends_the_child_too() -> None:
    """The AsyncRunner's twin of the Runner's: no subagent outlives its cancelled caller."""
    from agentfsm.runtime import subagent

    calls, store = Calls(), MemoryEventStore()
    child_model = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("create_ticket", {"order_id": "O-1"})),
            Decision.answer("ticket open"),
        ]
    )
    clerk = Agent("clerk", child_model, order_tools(calls), ToolPolicy(approval={"create_ticket"}))
    parent = ScriptedModel(
        [Decision.call_tools(ProposedCall("delegate", {"task": "open a ticket"}))]
    )
    runner = AsyncRunner(
        ThreadedAsyncEventStore(store),
        Agent("lead", parent, [subagent("delegate", clerk)]),
        clock=step_clock(),
        sleep=_sleep,
    )

    async def scenario() -> str:
        first = await runner.run("r1")
        assert first.children["r1/t1.1"].status == "waiting_approval"
        cancel(store, "r1", reason="the customer left")
        return (await runner.drive("r1")).status

    assert asyncio.run(scenario()) == "cancelled"
    child = store.load("r1/t1.1")
    assert (child.status, child.cancel_reason) == (
        "cancelled",
        "the run 'r1' that called it ended (cancelled)",
    )
    assert calls.effects == {}
    assert validate(store, ["r1", "r1/t1.1"]).ok


def test_a_crash_inside_a_call_goes_up_and_leaves_a_log_to_drive_on() -> None:
    """A BaseException is not swallowed by the batch; resume re-runs the idempotent call."""
    calls = Calls()

    async def charge(ctx: ToolContext) -> Any:
        calls.record(ctx)
        if calls.effects[ctx.idempotency_key] == 1:
            raise Crash
        return "charged"

    tool = Tool("charge", charge, idempotent=True)
    model = ScriptedModel([Decision.call_tools(ProposedCall("charge")), Decision.answer("ok")])
    store = MemoryEventStore()
    with pytest.raises(Crash):
        asyncio.run(_runner(store, model, [tool]).run("r1"))
    result = asyncio.run(_runner(store, model, [tool]).drive("r1"))
    assert result.status == "completed"
    assert calls.effects == {"r1:t1.1": 2}


def test_the_async_runner_on_native_async_postgres(postgres_dsn: str, pg_prefix: str) -> None:
    """`AsyncPostgresEventStore`: the approval run pauses, is approved, and completes."""
    from agentfsm.stores.postgres import AsyncPostgresEventStore

    calls = Calls()

    async def scenario() -> tuple[str, bool]:
        store = await AsyncPostgresEventStore.connect(
            postgres_dsn, table_prefix=pg_prefix, migrate=True
        )
        try:
            runner = AsyncRunner(
                store,
                Agent(
                    "support",
                    order_script(),
                    order_tools(calls),
                    ToolPolicy(approval={"create_ticket"}),
                ),
                clock=step_clock(),
                sleep=_sleep,
            )
            assert (await runner.run("r1")).status == "waiting_approval"
            await aapprove(store, "r1", "t2.1", "alice")
            result = await runner.drive("r1")
            return result.status, (await store.verify("r1")).ok
        finally:
            await store.close()

    assert asyncio.run(scenario()) == ("completed", True)
    assert calls.tools() == ["get_order", "create_ticket"]


def test_an_async_postgres_run_that_ended_leaves_no_lease_row(
    postgres_dsn: str, pg_prefix: str
) -> None:
    """The async Runner's lease of a run it drove to the end is gone with it (issue 32): the
    lease table keeps the runs that may be driven again."""
    import psycopg

    from agentfsm.stores.postgres import AsyncPostgresEventStore

    async def scenario() -> str:
        store = await AsyncPostgresEventStore.connect(
            postgres_dsn, table_prefix=pg_prefix, migrate=True
        )
        try:
            agent = Agent("a", lambda ctx: Decision.answer("done"), [])
            return (await AsyncRunner(store, agent, sleep=_sleep).run("r1", "work")).status
        finally:
            await store.close()

    assert asyncio.run(scenario()) == "completed"
    with psycopg.connect(postgres_dsn) as conn:
        found = conn.execute(f"SELECT count(*) FROM {pg_prefix}leases").fetchone()  # type: ignore[arg-type]
    assert found == (0,)
