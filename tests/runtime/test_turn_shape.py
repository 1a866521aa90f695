"""A turn's appends: the next step's opening event rides along with the batch before it.

A one-tool turn is two appends, not four: the decision with its call's `tool.requested` and
`tool.started` (the call is made right after), then the call's result with the next turn's
`model.started`. A final answer and `run.completed` are one append. Persist-before-acting
holds: the event that says an effect starts is durable before the effect.

Where the ride-along would change what happens, it is left out and the step goes its own
way as before: a call that needs approval, a guard that refuses the start, a later call of
the batch, an `accept` check. A heartbeat (a job's) does not: it is not called between the
decision and the call that started with it, and the call is confirmed (the job's ownership
check) after that commit, before it runs. Each crash window of the new shape resumes (here
in-process with `Crash`; with SIGKILL on SQLite in `test_fault_injection`), and so do logs
written in the old shape.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from structlog.testing import capture_logs

from agentfsm.events import Event, step_clock
from agentfsm.events import models as m
from agentfsm.guards.base import GuardContext, Verdict
from agentfsm.record import RunRecord
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
    submit,
)
from agentfsm.stores import MemoryEventStore, ThreadedAsyncEventStore

from .helpers import Calls, Crash, runner_for, types, validate


class Batches(MemoryEventStore):
    """A memory store that remembers each append's event types."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[str]] = []

    def append(self, run_id: str, events: Sequence[Event], expected_version: int) -> RunRecord:
        record = super().append(run_id, events, expected_version)
        self.batches.append([e.type for e in events])
        return record


def _lookup(calls: Calls, name: str = "lookup", **flags: Any) -> Tool:
    def fn(ctx: ToolContext) -> Any:
        calls.record(ctx)
        return {"n": ctx.args.get("n")}

    return Tool(name, fn, **({"side_effects": False} | flags))


def _two_turns() -> ScriptedModel:
    return ScriptedModel(
        [
            Decision.call_tools(ProposedCall("lookup", {"n": 1})),
            Decision.call_tools(ProposedCall("lookup", {"n": 2})),
            Decision.answer("done"),
        ]
    )


TOOL_TURN = ["model.completed", "tool.requested", "tool.started"]
NEXT_TURN = ["tool.completed", "model.started"]
FINAL = ["model.completed", "run.completed"]
TWO_TURNS = [["run.started"], ["model.started"], TOOL_TURN, NEXT_TURN, TOOL_TURN, NEXT_TURN, FINAL]


def _run(runner: str, store: Batches, model: Any, tools: list[Tool], **kwargs: Any) -> Any:
    if runner == "sync":
        return runner_for(store, model, tools, **kwargs).run("r1")
    arunner = AsyncRunner(
        ThreadedAsyncEventStore(store),
        Agent("support", model, tools),
        clock=step_clock(),
        **kwargs,
    )
    return asyncio.run(arunner.run("r1"))


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_a_tool_turn_is_two_appends(runner: str) -> None:
    """[decision, requested, started], then [result, next model.started]; the end is one."""
    store, calls = Batches(), Calls()
    result = _run(runner, store, _two_turns(), [_lookup(calls)])
    assert (result.status, calls.tools()) == ("completed", ["lookup", "lookup"])
    assert store.batches == TWO_TURNS
    assert validate(store, ["r1"]).ok


def test_only_the_first_call_of_a_batch_starts_with_the_decision() -> None:
    """A later call starts in its own append: a crash during the first must not make it look
    as if the second may have run."""
    store, calls = Batches(), Calls()
    model = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("lookup", {"n": 1}), ProposedCall("lookup", {"n": 2})),
            Decision.answer("ok"),
        ]
    )
    assert runner_for(store, model, [_lookup(calls)]).run("r1").status == "completed"
    assert store.batches[2:] == [
        ["model.completed", "tool.requested", "tool.requested", "tool.started"],
        ["tool.completed"],
        ["tool.started"],
        NEXT_TURN,
        FINAL,
    ]


def test_a_call_that_needs_approval_does_not_start_with_the_decision() -> None:
    """The decision and the approval request are one append; nothing starts."""
    store, calls = Batches(), Calls()
    model = ScriptedModel([Decision.call_tools(ProposedCall("refund", {"amount": 5}))])
    policy = ToolPolicy(approval=frozenset({"refund"}))
    result = runner_for(store, model, [_lookup(calls, "refund")], policy=policy).run("r1")
    assert (result.status, calls.tools()) == ("waiting_approval", [])
    assert store.batches[2:] == [["model.completed", "approval.requested"]]


@attrs.frozen
class _NoStarts:
    """A guard on the `deadline` edges that refuses every `tool.started`."""

    name: str = "deadline"

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        if isinstance(event, m.ToolStarted):
            return Verdict(self.name, "deadline", "no more calls")
        return None


def test_a_start_a_guard_refuses_is_left_out_and_refused_as_its_own_step() -> None:
    """The decision is recorded without it; the start alone is refused (logged once) and
    the run is terminated, as when every step was its own append."""
    store, calls = Batches(), Calls()
    model = ScriptedModel([Decision.call_tools(ProposedCall("lookup", {"n": 1}))])
    with capture_logs() as logs:
        result = runner_for(store, model, [_lookup(calls)], guards=[_NoStarts()]).run("r1")
    assert (result.status, result.stop_reason, calls.tools()) == ("terminated", "deadline", [])
    assert store.batches[2:] == [["model.completed", "tool.requested"], ["run.terminated"]]
    refused = [line for line in logs if line["event"] == "guard.rejected"]
    assert [line["event_type"] for line in refused] == ["tool.started"]


def test_an_accept_check_is_its_own_step() -> None:
    """With `accept`, user code judges the answer after it is recorded: two appends."""
    store = Batches()
    config = RunnerConfig(accept=lambda output, record: None)
    model = ScriptedModel([Decision.answer("done")])
    assert runner_for(store, model, [], config=config).run("r1").status == "completed"
    assert store.batches[2:] == [["model.completed"], ["run.completed"]]


class Timeline(Batches):
    """`Batches` that also writes each append, heartbeat, confirm and tool call, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def append(self, run_id: str, events: Sequence[Event], expected_version: int) -> RunRecord:
        record = super().append(run_id, events, expected_version)
        self.seen.append("+".join(e.type for e in events))
        return record


@pytest.mark.parametrize("runner", ["sync", "async"])
def test_with_a_heartbeat_the_call_starts_with_the_decision_and_is_confirmed_before_it_runs(
    runner: str,
) -> None:
    """A job's drive (a heartbeat and a `confirm`) has the shape of any other: the call's
    `tool.started` goes in with the decision, in one commit. The order persist, check,
    act holds: `confirm` (the job's ownership check) comes after that commit and right
    before the tool; the heartbeat, which may stop the drive, is not called between the
    two (it would leave a call started and not made)."""
    store = Timeline()

    def fn(ctx: ToolContext) -> Any:
        store.seen.append("call")
        return {"n": ctx.args.get("n")}

    tools = [Tool("lookup", fn, side_effects=True, idempotent=True)]

    def beat(record: RunRecord) -> None:
        store.seen.append("beat")

    def confirm(record: RunRecord) -> None:
        store.seen.append("confirm")

    submit(store, "r1")
    if runner == "sync":
        result = runner_for(store, _two_turns(), tools).drive("r1", heartbeat=beat, confirm=confirm)
    else:
        arunner = AsyncRunner(
            ThreadedAsyncEventStore(store),
            Agent("support", _two_turns(), tools),
            clock=step_clock(),
        )
        result = asyncio.run(arunner.drive("r1", heartbeat=beat, confirm=confirm))
    assert result.status == "completed"
    assert store.batches[1:] == TWO_TURNS[1:]
    decided, result_and_next = "+".join(TOOL_TURN), "+".join(NEXT_TURN)
    assert store.seen == [
        "run.started",
        "beat",
        "model.started",
        decided,
        "confirm",
        "call",
        result_and_next,
        "beat",
        decided,
        "confirm",
        "call",
        result_and_next,
        "beat",
        "+".join(FINAL),
        "beat",  # before the last step: the run's end
    ]


class TestCrashWindows:
    """Each place the new shape can be cut off, resumed by a new Runner."""

    def test_after_the_decision_and_start_a_safe_call_is_made_again(self) -> None:
        """Started with the decision, then the process died: re-executed, same key."""
        calls = Calls()
        state = {"crash": True}

        def fn(ctx: ToolContext) -> Any:
            if state.pop("crash", False):
                raise Crash  # before the tool acted
            calls.record(ctx)
            return "ok"

        tool = Tool("lookup", fn, idempotent=True)
        store = Batches()
        model = ScriptedModel([Decision.call_tools(ProposedCall("lookup")), Decision.answer("ok")])
        with pytest.raises(Crash):
            runner_for(store, model, [tool]).run("r1")
        assert store.batches[-1] == TOOL_TURN
        assert runner_for(store, model, [tool]).drive("r1").status == "completed"
        assert calls.log == [("lookup", "r1:t1.1", 1)]
        assert validate(store, ["r1"]).ok

    def test_after_the_decision_and_start_a_call_with_side_effects_is_surfaced(self) -> None:
        """Not safe to repeat: `outcome_unknown`, never run a second time."""
        store = Batches()
        died = []

        def send(ctx: ToolContext) -> Any:
            died.append(ctx.idempotency_key)
            raise Crash

        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("send")),
                lambda ctx: Decision.answer(ctx.results[0].status),
            ]
        )
        with pytest.raises(Crash):
            runner_for(store, model, [Tool("send", send)]).run("r1")
        result = runner_for(store, model, [Tool("send", send)]).drive("r1")
        assert (result.status, result.final_output, died) == ("completed", "unknown", ["r1:t1.1"])

    def test_after_the_result_and_model_started_the_model_is_asked_again(self) -> None:
        """`model.started` went in with the result: resume asks the model in that same turn,
        without a second `model.started`; the call is not made again."""
        store, calls = Batches(), Calls()
        answers: list[Any] = [
            Decision.call_tools(ProposedCall("lookup", {"n": 1})),
            Crash(),
            Decision.answer("ok"),
        ]
        with pytest.raises(Crash):
            runner_for(store, ScriptedModel(answers), [_lookup(calls)]).run("r1")
        assert store.batches[-1] == NEXT_TURN
        result = runner_for(store, ScriptedModel(answers[2:]), [_lookup(calls)]).drive("r1")
        assert (result.status, result.record.turn, calls.tools()) == ("completed", 2, ["lookup"])
        assert types(store, "r1")[-4:] == ["tool.completed", "model.started", *FINAL]


SEQUENCES = {"tool.requested": 4, "tool.started": 5, "tool.completed": 6}


class TestOldShape:
    """Logs written one step per append (before this shape) resume where they end."""

    def _old_log(self, store: MemoryEventStore, upto: str) -> None:
        submit(store, "r1")
        record = store.load("r1")
        at = "2026-01-01T00:00:00+00:00"
        fields = [
            ("model.started", m.ModelStarted, {}),
            (
                "model.completed",
                m.ModelCompleted,
                {
                    "decision": "tool_calls",
                    "tool_calls": [{"action_id": "t1.1", "tool": "lookup", "arguments": {"n": 1}}],
                },
            ),
            (
                "tool.requested",
                m.ToolRequested,
                {"action_id": "t1.1", "tool": "lookup", "arguments": {"n": 1}},
            ),
            ("tool.started", m.ToolStarted, {"action_id": "t1.1", "attempt": 1}),
            ("tool.completed", m.ToolCompleted, {"action_id": "t1.1", "result": {"n": 1}}),
        ]
        for name, cls, extra in fields:
            event = cls(run_id="r1", sequence=record.version + 1, occurred_at=at, **extra)
            record = store.append("r1", [event], record.version)
            if name == upto:
                return

    @pytest.mark.parametrize("upto", ["tool.requested", "tool.started", "tool.completed"])
    def test_a_run_cut_off_between_old_steps_completes(self, upto: str) -> None:
        store, calls = Batches(), Calls()
        self._old_log(store, upto)
        model = ScriptedModel([lambda ctx: Decision.answer(str(ctx.turn))])
        tool = _lookup(calls, idempotent=True)
        result = runner_for(store, model, [tool]).drive("r1")
        assert (result.status, result.final_output) == ("completed", "2")
        assert calls.tools() == ([] if upto == "tool.completed" else ["lookup"])
        after = [e.type for e in store.events("r1", after=SEQUENCES[upto])]
        assert (
            after
            == {
                "tool.requested": ["tool.started", *NEXT_TURN, *FINAL],
                "tool.started": [*NEXT_TURN, *FINAL],  # an idempotent call: made again
                "tool.completed": ["model.started", *FINAL],
            }[upto]
        )
        assert validate(store, ["r1"]).ok


class _Filtered:
    """A logger that takes warnings only, and remembers every line it is given."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def bind(self, **values: Any) -> _Filtered:
        return self

    def is_enabled_for(self, level: int) -> bool:
        return level >= logging.WARNING

    def info(self, event: str, **fields: Any) -> None:
        self.lines.append(event)

    warning = info


def test_transition_lines_are_not_built_for_a_logger_that_filters_them_out() -> None:
    """Info filtered out: no `transition.applied` line is made, per event, to be dropped."""
    log = _Filtered()
    model = ScriptedModel(
        [Decision.call_tools(ProposedCall("lookup", {"n": 1})), Decision.answer("ok")]
    )
    result = runner_for(Batches(), model, [_lookup(Calls())], logger=log).run("r1")
    assert result.status == "completed"
    assert "transition.applied" not in log.lines
