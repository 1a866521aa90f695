"""SIGKILL a worker at every distinct step of two runs; a new process resumes each.

The runs are the examples' order/ticket run and cancel-order-with-approval run, on SQLite.
A worker process is killed right after its N-th durable append (for every N the run has),
or inside the side-effecting tool right after the backend acted. A fresh process resumes
the run. Each time: the run ends as the unharmed run does (`completed`), its log verifies,
no side-effecting tool acted twice for one idempotency key (the fake backends' own durable
ledger says so), and a call that may have acted without a recorded result is surfaced as
`outcome_unknown`.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import structlog

from agentfsm.events import Event
from agentfsm.record import RunRecord
from agentfsm.runtime import ToolContext, approve
from agentfsm.stores import SQLiteEventStore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "runtime"))

import cancel_order_approval
import order_ticket
from kit import EffectLedger

ORDER_APPENDS = 7
APPROVAL_APPENDS = (5, 4)  # before the approval, after it


class DyingStore(SQLiteEventStore):
    """A SQLite store whose process is SIGKILLed right after its `die_after`-th append."""

    def __init__(self, path: Path, die_after: int | None) -> None:
        super().__init__(path, synchronous="NORMAL")
        self.die_after = die_after
        self.appends = 0

    def append(self, run_id: str, events: Sequence[Event], expected_version: int) -> RunRecord:
        record = super().append(run_id, events, expected_version)
        self.appends += 1
        if self.appends == self.die_after:
            os.kill(os.getpid(), signal.SIGKILL)
        return record


class DyingLedger(EffectLedger):
    """The backend acts, then the process is SIGKILLed before the tool returns."""

    def __init__(self, path: Path, die_in: str | None) -> None:
        super().__init__(path)
        self.die_in = die_in

    def act(self, ctx: ToolContext, result: Any, *, honour_key: bool) -> Any:
        value = super().act(ctx, result, honour_key=honour_key)
        if ctx.tool == self.die_in:
            os.kill(os.getpid(), signal.SIGKILL)
        return value


def _quiet() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def _drive(
    scenario: str, workdir: Path, die_after: int | None, die_in: str | None, phase: str
) -> None:
    """In a child process: start, resume, or approve-and-resume the scenario's run."""
    _quiet()
    module: ModuleType = order_ticket if scenario == "order" else cancel_order_approval
    with DyingStore(workdir / "runs.db", die_after) as store:
        runner = module.runner(store, DyingLedger(workdir / "effects.db", die_in))
        if phase == "start":
            if scenario == "order":
                runner.run(module.RUN_ID, module.OBJECTIVE, limits=module.LIMITS)
            else:
                runner.run(module.RUN_ID, "Cancel order 123.", limits=module.LIMITS)
            return
        result = runner.drive(module.RUN_ID)
        if result.status == "waiting_approval":
            (pending,) = result.pending_approvals
            approve(store, module.RUN_ID, pending.action_id, "alice")
            runner.drive(module.RUN_ID)


def _in_child(*args: Any) -> int | None:
    proc = multiprocessing.get_context("fork").Process(target=_drive, args=args)
    proc.start()
    proc.join(timeout=120)
    return proc.exitcode


def _check(scenario: str, workdir: Path, killed_inside: str | None) -> RunRecord:
    module: ModuleType = order_ticket if scenario == "order" else cancel_order_approval
    with SQLiteEventStore(workdir / "runs.db") as store:
        record = store.load(module.RUN_ID)
        report = store.verify(module.RUN_ID)
    assert report.ok, str(report)
    assert record.status == "completed"
    ledger = EffectLedger(workdir / "effects.db")
    assert set(ledger.effects().values()) <= {1}, ledger.effects()
    for action in record.actions.values():
        key = action.idempotency_key
        if action.status == "unknown":
            assert action.reason is not None
            assert "not idempotent, so it was not run again" in action.reason
            assert ledger.effects().get(key or "", 0) <= 1
        else:
            assert action.status == "succeeded", action
    unknown = [a.tool for a in record.actions.values() if a.status == "unknown"]
    if killed_inside == "cancel_order":
        assert unknown == ["cancel_order"]
        assert record.final_output.startswith("Order 123 was not cancelled (unknown:")
    if killed_inside == "create_ticket":
        assert unknown == []
        assert ledger.calls() == {f"{module.RUN_ID}:t2.1": 2}  # called again, acted once
    return record


def test_the_unharmed_runs_take_the_counted_steps(tmp_path: Path) -> None:
    """The kill points below cover every append these runs make."""
    with DyingStore(tmp_path / "order.db", None) as store:
        order_ticket.runner(store).run(
            order_ticket.RUN_ID, order_ticket.OBJECTIVE, limits=order_ticket.LIMITS
        )
        assert (store.appends, store.load(order_ticket.RUN_ID).status) == (
            ORDER_APPENDS,
            "completed",
        )
    with DyingStore(tmp_path / "approval.db", None) as store:
        runner = cancel_order_approval.runner(store)
        runner.run("cancel-123", "Cancel order 123.", limits=cancel_order_approval.LIMITS)
        assert store.appends == APPROVAL_APPENDS[0]
        approve(store, "cancel-123", "t2.1", "alice")
        store.appends = 0
        assert runner.drive("cancel-123").status == "completed"
        assert store.appends == APPROVAL_APPENDS[1]


@pytest.mark.parametrize(
    ("die_after", "die_in"),
    [(n, None) for n in range(1, ORDER_APPENDS + 1)] + [(None, "create_ticket")],
)
def test_the_order_run_survives_a_kill(
    tmp_path: Path, die_after: int | None, die_in: str | None
) -> None:
    """Killed at one step, resumed by another process: completed, each ticket opened once."""
    assert _in_child("order", tmp_path, die_after, die_in, "start") == -signal.SIGKILL
    assert _in_child("order", tmp_path, None, None, "resume") == 0
    _check("order", tmp_path, die_in)


@pytest.mark.parametrize(
    ("phase", "die_after", "die_in"),
    [("start", n, None) for n in range(1, APPROVAL_APPENDS[0] + 1)]
    + [("approved", n, None) for n in range(1, APPROVAL_APPENDS[1] + 1)]
    + [("approved", None, "cancel_order")],
)
def test_the_approval_run_survives_a_kill(
    tmp_path: Path, phase: str, die_after: int | None, die_in: str | None
) -> None:
    """Before or after the approval: never cancelled twice; a lost result is surfaced."""
    if phase == "start":
        assert _in_child("approval", tmp_path, die_after, die_in, "start") == -signal.SIGKILL
    else:
        assert _in_child("approval", tmp_path, None, None, "start") == 0
        with SQLiteEventStore(tmp_path / "runs.db") as store:
            (pending,) = store.load("cancel-123").pending_approvals
            approve(store, "cancel-123", pending, "alice")
        assert _in_child("approval", tmp_path, die_after, die_in, "resume") == -signal.SIGKILL
    assert _in_child("approval", tmp_path, None, None, "resume") == 0
    record = _check("approval", tmp_path, die_in)
    if (phase, die_after) == ("approved", 2):  # after tool.started, before the backend acted
        assert record.actions["t2.1"].status == "unknown"
        assert EffectLedger(tmp_path / "effects.db").effects() == {}
    elif phase == "approved" and die_in is None:
        assert EffectLedger(tmp_path / "effects.db").effects() == {"cancel-123:t2.1": 1}
