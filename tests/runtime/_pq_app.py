"""The agents the Procrastinate engine's tests drive, and a worker process to run them.

A run's objective says what it does (so any worker, in any process, drives it the same):

- `plain`: look an order up (safe), open a ticket (idempotent, honours its key), answer;
- `approve`: the same, with the ticket needing a person's approval (decided by the test);
- `expire`: the ticket's approval expires after `EXPIRES` seconds if nobody decides;
- `sub`: a subagent (`research`) looks the order up and answers, then the parent answers;
- `subask`: the subagent opens a ticket, which needs a person's approval in its own run;
- `quick`: answers at once (one model turn, no tool);
- `mail`: sends an email (side effects, not idempotent: never re-run, else
  `outcome_unknown`) and answers;
- `flaky`: asks for a quote (safe), which fails retryably on its first attempt: the retry
  is due `BACKOFF` seconds later (a durable timer, not a sleep).

Every tool call is written to a `DurableLedger` (a SQLite file that outlives killed workers),
so a test can count what happened per idempotency key.

Run a worker: `python -m tests.runtime._pq_app DSN QUEUE LEDGER NAME` (settings from the
environment: `PQ_HEARTBEAT`, `PQ_STALLED`, `PQ_TOOL_DELAY`).
"""

from __future__ import annotations

import itertools
import logging
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import structlog
from psycopg.conninfo import make_conninfo

from agentfsm.runtime import (
    ALLOW,
    Agent,
    Decision,
    ProposedCall,
    Runner,
    RunnerConfig,
    Tool,
    ToolContext,
    ToolError,
    needs_approval,
    subagent,
)
from agentfsm.runtime.procrastinate import EngineSettings, ProcrastinateEngine
from agentfsm.stores.base import EventStore
from tests.runtime.helpers import DurableLedger

EXPIRES = 1.0
BACKOFF = 1.0


def _delay() -> None:
    time.sleep(float(os.environ.get("PQ_TOOL_DELAY", "0.02")))


def tools(ledger: DurableLedger) -> list[Tool]:
    def get_order(ctx: ToolContext) -> Any:
        _delay()
        return {"order_id": ctx.args["order_id"], "paid": True}

    def create_ticket(ctx: ToolContext) -> Any:
        _delay()
        ledger.act(ctx, honour_key=True)
        return {"ticket_id": f"T-{ctx.args['order_id']}"}

    def send_email(ctx: ToolContext) -> Any:
        _delay()
        ledger.act(ctx, honour_key=False)
        return {"sent": True}

    def get_quote(ctx: ToolContext) -> Any:
        _delay()
        if ctx.attempt == 1:
            raise ToolError("the pricing service is busy", retryable=True)
        return {"price": 7}

    return [
        Tool("get_quote", get_quote, side_effects=False, max_attempts=3),
        Tool("get_order", get_order, side_effects=False),
        Tool("create_ticket", create_ticket, idempotent=True),
        Tool("send_email", send_email, side_effects=True),
    ]


def _research(ctx: Any) -> Decision:
    if (ctx.objective or "").startswith("approve"):
        if ctx.turn == 1:
            return Decision.call_tools(ProposedCall("create_ticket", {"order_id": ctx.run_id}))
        return Decision.answer(f"ticket: {ctx.results[0].status}")
    if ctx.turn == 1:
        return Decision.call_tools(ProposedCall("get_order", {"order_id": "O-7"}))
    return Decision.answer("order O-7 is paid")


def _model(ctx: Any) -> Decision:
    kind = (ctx.objective or "plain").split()[0]
    if kind in ("sub", "subask"):
        task = "is O-7 paid?" if kind == "sub" else "approve a ticket for O-7"
        if ctx.turn == 1:
            return Decision.call_tools(ProposedCall("research", {"task": task}))
        return Decision.answer(f"research says: {ctx.results[0].result}")
    if kind == "flaky":
        if ctx.turn == 1:
            return Decision.call_tools(ProposedCall("get_quote", {"item": "O-7"}))
        return Decision.answer(f"quoted {ctx.results[0].result['price']}")
    if kind == "long":  # "long N": N turns, each a call
        if ctx.turn < int(ctx.objective.split()[1]):
            return Decision.call_tools(
                ProposedCall("get_order", {"order_id": f"{ctx.run_id}-{ctx.turn}"})
            )
        return Decision.answer("long done")
    if kind == "quick":  # one turn, no tool: what a queue's cost per run is made of
        return Decision.answer("quick")
    if kind == "mail":
        if ctx.turn == 1:
            return Decision.call_tools(ProposedCall("send_email", {"to": "ann@example.com"}))
        return Decision.answer("mailed")
    if ctx.turn == 1:
        return Decision.call_tools(ProposedCall("get_order", {"order_id": ctx.run_id}))
    if ctx.turn == 2:
        return Decision.call_tools(ProposedCall("create_ticket", {"order_id": ctx.run_id}))
    last = ctx.results[0]
    if last.status == "rejected":
        return Decision.answer(f"not opened: {last.reason}")
    return Decision.answer(f"opened {last.result['ticket_id']}")


def _policy(action: Any, record: Any) -> Any:
    kind = (record.objective or "plain").split()[0]
    if action.tool == "create_ticket" and kind == "approve":
        return needs_approval("a ticket needs a person")
    if action.tool == "create_ticket" and kind == "expire":
        return needs_approval("a ticket needs a person", expires_in=timedelta(seconds=EXPIRES))
    return ALLOW


def runner_factory(ledger_path: str) -> Any:
    ledger = DurableLedger(ledger_path)

    def make(store: EventStore) -> Runner:
        research = subagent("research", Agent("researcher", _research, tools(ledger), _policy))
        agent = Agent("support", _model, [*tools(ledger), research], _policy)
        return Runner(store, agent, config=RunnerConfig(backoff=lambda n: BACKOFF))

    return make


def make_runner(store: EventStore) -> Runner:
    """`agentfsm worker --runner tests.runtime._pq_app:make_runner` (ledger: `$PQ_LEDGER`)."""
    made: Runner = runner_factory(os.environ["PQ_LEDGER"])(store)
    return made


def settings(queue: str) -> EngineSettings:
    heartbeat = float(os.environ.get("PQ_HEARTBEAT", "0.3"))
    stalled = float(os.environ.get("PQ_STALLED", "1.5"))
    return EngineSettings(
        queue=queue,
        heartbeat=heartbeat,
        stalled_after=stalled,
        recover_every=heartbeat,
        fence_every=heartbeat,
        poll=0.5,
        delete_jobs="never",
    )


def engine(dsn: str, queue: str, ledger: str) -> ProcrastinateEngine:
    return ProcrastinateEngine(dsn, runner_factory(ledger), settings=settings(queue))


_databases = itertools.count()


@contextmanager
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """A new database on the server (Procrastinate's tables are not prefixed), dropped after."""
    name = f"pq_{os.getpid()}_{next(_databases)}"
    with psycopg.connect(admin_dsn, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield make_conninfo(admin_dsn, dbname=name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


def main(argv: list[str]) -> None:
    dsn, queue, ledger, name = argv
    level = getattr(logging, os.environ.get("PQ_LOG", "ERROR"))
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
    logging.basicConfig(level=logging.CRITICAL)
    engine(dsn, queue, ledger).serve(name=name)


if __name__ == "__main__":
    main(sys.argv[1:])
