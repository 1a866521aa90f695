"""Shared pieces of the runtime tests: a call ledger, a sleep recorder, the order tools."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable
from typing import Any

import attrs
import pytest

from agentfsm.events import dump_event, step_clock
from agentfsm.reducers.validate import ValidationReport, validate_lines
from agentfsm.runtime import (
    Agent,
    AsyncRunner,
    Decision,
    Policy,
    ProposedCall,
    Runner,
    RunnerConfig,
    RunResult,
    ScriptedModel,
    Tool,
    ToolContext,
    allow_all,
)
from agentfsm.stores import EventStore, MemoryEventStore, ThreadedAsyncEventStore


class Crash(BaseException):
    """Stands in for the process dying: nothing catches it, nothing after it runs."""


@attrs.define
class Calls:
    """What the fake tools did: every call, and how often each idempotency key acted."""

    log: list[tuple[str, str, int]] = attrs.field(factory=list)
    effects: Counter[str] = attrs.field(factory=Counter)

    def record(self, ctx: ToolContext) -> None:
        self.log.append((ctx.tool, ctx.idempotency_key, ctx.attempt))
        self.effects[ctx.idempotency_key] += 1

    def tools(self) -> list[str]:
        return [tool for tool, _, _ in self.log]


@attrs.define
class Sleeps:
    """The sleep a Runner is given: remembers each delay, waits for none."""

    delays: list[float] = attrs.field(factory=list)

    def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def order_tools(calls: Calls) -> list[Tool]:
    """`get_order` (a lookup) and `create_ticket` (idempotent: honours its key)."""

    def get_order(ctx: ToolContext) -> Any:
        calls.record(ctx)
        return {"order_id": ctx.args["order_id"], "payment": "paid", "shipment": "not_shipped"}

    def create_ticket(ctx: ToolContext) -> Any:
        calls.record(ctx)
        return {"ticket_id": "T-9001", "order_id": ctx.args["order_id"]}

    return [
        Tool("get_order", get_order, side_effects=False),
        Tool("create_ticket", create_ticket, idempotent=True),
    ]


def order_script() -> ScriptedModel:
    """Look the order up, open a ticket, answer with its number."""
    return ScriptedModel(
        [
            Decision.call_tools(ProposedCall("get_order", {"order_id": "O-1001"})),
            lambda ctx: Decision.call_tools(
                ProposedCall("create_ticket", {"order_id": ctx.results[0].result["order_id"]})
            ),
            lambda ctx: Decision.answer(f"Opened ticket {ctx.results[0].result['ticket_id']}."),
        ]
    )


def runner_for(
    store: EventStore,
    model: Any,
    tools: Iterable[Tool],
    *,
    policy: Policy = allow_all,
    sleep: Sleeps | None = None,
    config: RunnerConfig | None = None,
    **kwargs: Any,
) -> Runner:
    """A Runner of one agent (`support`) on a deterministic clock."""
    return Runner(
        store,
        Agent("support", model, list(tools), policy),
        clock=kwargs.pop("clock", step_clock()),
        sleep=sleep if sleep is not None else Sleeps(),
        config=config,
        **kwargs,
    )


#: Runs a test with the sync `Runner`, then with the `AsyncRunner` (see `drive_r1`).
RUNNERS = pytest.mark.parametrize("runner", ["sync", "async"])


def drive_r1(
    runner: str,
    model: Any,
    tools: list[Tool],
    store: MemoryEventStore | None = None,
    *,
    policy: Policy = allow_all,
    **run: Any,
) -> tuple[RunResult, MemoryEventStore]:
    """Run `r1` of agent `support` with the sync Runner or the AsyncRunner (`runner`: "sync"
    or "async") on `store` (a fresh memory store); `run` are `run()`'s arguments, with the
    runner's `guards` and `config`."""
    store = store if store is not None else MemoryEventStore()
    guards = run.pop("guards", ())
    config = run.pop("config", None)
    if runner == "sync":
        sync = runner_for(store, model, tools, policy=policy, guards=guards, config=config)
        return sync.run("r1", **run), store
    arunner = AsyncRunner(
        ThreadedAsyncEventStore(store),
        Agent("support", model, tools, policy),
        guards=guards,
        clock=step_clock(),
        config=config,
    )
    return asyncio.run(arunner.run("r1", **run)), store


def types(store: EventStore, run_id: str) -> list[str]:
    """The run's event types, in order."""
    return [e.type for e in store.events(run_id)]


def validate(store: EventStore, run_ids: Iterable[str]) -> ValidationReport:
    """The stored logs of `run_ids`, exported as JSON Lines, through `validate_lines`."""
    lines = [dump_event(e) for run_id in run_ids for e in store.events(run_id)]
    return validate_lines(lines, keep_going=True)


class DurableLedger:
    """A fake backend's own ledger in a SQLite file: calls and effects per idempotency key.

    It outlives a killed process, so tests can count what really happened. A tool that
    honours its key returns the first result for a repeated key without acting again.
    """

    def __init__(self, path: Any) -> None:
        import sqlite3

        self.path = str(path)
        with sqlite3.connect(self.path) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS ledger (key TEXT PRIMARY KEY, tool TEXT NOT NULL, "
                "effects INTEGER NOT NULL, calls INTEGER NOT NULL)"
            )
        db.close()

    def act(self, ctx: ToolContext, *, honour_key: bool) -> None:
        """Record a call; an effect unless the key was seen and the tool honours keys."""
        import sqlite3

        with sqlite3.connect(self.path, timeout=60) as db:
            seen = db.execute("SELECT 1 FROM ledger WHERE key = ?", (ctx.idempotency_key,))
            if seen.fetchone() is None:
                db.execute(
                    "INSERT INTO ledger VALUES (?, ?, 1, 1)", (ctx.idempotency_key, ctx.tool)
                )
            else:
                effect = 0 if honour_key else 1
                db.execute(
                    "UPDATE ledger SET calls = calls + 1, effects = effects + ? WHERE key = ?",
                    (effect, ctx.idempotency_key),
                )
        db.close()

    def rows(self) -> dict[str, tuple[str, int, int]]:
        """key -> (tool, effects, calls)."""
        import sqlite3

        with sqlite3.connect(self.path, timeout=60) as db:
            found = db.execute("SELECT key, tool, effects, calls FROM ledger").fetchall()
        db.close()
        return {key: (tool, effects, calls) for key, tool, effects, calls in found}


def ledger_order_tools(ledger: DurableLedger) -> list[Tool]:
    """The order tools, writing each call to `ledger` (the ticket honours its key)."""

    def get_order(ctx: ToolContext) -> Any:
        return {"order_id": ctx.args["order_id"], "payment": "paid", "shipment": "not_shipped"}

    def create_ticket(ctx: ToolContext) -> Any:
        ledger.act(ctx, honour_key=True)
        return {"ticket_id": "T-9001", "order_id": ctx.args["order_id"]}

    return [
        Tool("get_order", get_order, side_effects=False),
        Tool("create_ticket", create_ticket, idempotent=True),
    ]


def turn_order_script() -> ScriptedModel:
    """The order script, answering by the run's turn (a resumed run gets the right step)."""
    model = order_script()
    return ScriptedModel(model.script, by_turn=True)
