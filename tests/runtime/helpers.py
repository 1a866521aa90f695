"""Shared pieces of the runtime tests: a call ledger, a sleep recorder, the order tools."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

import attrs

from agentfsm.adapters.stores import EventStore
from agentfsm.events import dump_event, step_clock
from agentfsm.reducers.validate import ValidationReport, validate_lines
from agentfsm.runtime import (
    Agent,
    Decision,
    Policy,
    Runner,
    RunnerConfig,
    ScriptedModel,
    Tool,
    ToolContext,
    allow_all,
    call,
)


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
            Decision.calls(call("get_order", order_id="O-1001")),
            lambda ctx: Decision.calls(
                call("create_ticket", order_id=ctx.results[0].result["order_id"])
            ),
            lambda ctx: Decision.final(f"Opened ticket {ctx.results[0].result['ticket_id']}."),
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


def types(store: EventStore, run_id: str) -> list[str]:
    """The run's event types, in order."""
    return [e.type for e in store.events(run_id)]


def validate(store: EventStore, run_ids: Iterable[str]) -> ValidationReport:
    """The stored logs of `run_ids`, exported as JSON Lines, through `validate_lines`."""
    lines = [dump_event(e) for run_id in run_ids for e in store.events(run_id)]
    return validate_lines(lines, keep_going=True)
