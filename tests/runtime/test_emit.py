"""The agent acts in your lifecycle: tools and decisions cause the table's own events.

A loan application (`tests/fixtures/emit_loan.py`) is driven end to end by the `Runner` and
the `AsyncRunner` with a scripted model: a tool's call causes `loan.documents_requested`
(the run waits for a person), the model's decision `loan.sent_to_underwriting` (it waits
for an underwriter), and people append the answers. The table decides every proposal: an
event it forbids where the run stands, fields that fail the type's model, or a type the
tool does not declare are refused before anything is written, and the model reads why on
its next turn, with the events that were allowed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from agentfsm.events import Event, LogBuilder, dump_event, step_clock
from agentfsm.record import RunRecord
from agentfsm.reducers import Reducer
from agentfsm.runtime import (
    Agent,
    AsyncRunner,
    Decision,
    Emit,
    ProposedCall,
    Runner,
    RunResult,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolResult,
    append_event,
)
from agentfsm.stores import MemoryEventStore, StoreOptions, ThreadedAsyncEventStore
from tests.fixtures.emit_loan import LOAN_TABLE, loan_script, loan_tools

from .helpers import RUNNERS


class Batches(MemoryEventStore):
    """A memory store of loan runs that remembers the types of each append (one commit)."""

    def __init__(self) -> None:
        super().__init__(options=StoreOptions(reducer=Reducer(LOAN_TABLE)))
        self.batches: list[list[str]] = []

    def append(
        self, run_id: str, events: Sequence[Event], expected_version: int, **kwargs: Any
    ) -> RunRecord:
        record = super().append(run_id, events, expected_version, **kwargs)
        self.batches.append([e.type for e in events])
        return record


def drive(
    runner: str,
    store: Batches,
    model: Any,
    tools: list[Tool],
    run_id: str = "L-1",
    *,
    resume: bool = False,
) -> RunResult:
    """Start (or resume) `run_id` with the sync Runner or the AsyncRunner."""
    agent = Agent("loans", model, tools)
    if runner == "sync":
        sync = Runner(store, agent, clock=step_clock())
        return sync.drive(run_id) if resume else sync.run(run_id, "Loan for A-7")
    arunner = AsyncRunner(ThreadedAsyncEventStore(store), agent, clock=step_clock())
    steps = arunner.drive(run_id) if resume else arunner.run(run_id, "Loan for A-7")
    return asyncio.run(steps)


def log(store: MemoryEventStore, run_id: str = "L-1") -> list[dict[str, Any]]:
    """The run's events as their JSON, without the envelope's time."""
    out = []
    for event in store.events(run_id):
        data = event.model_dump(mode="json", exclude_unset=True)
        data.pop("occurred_at")
        data.pop("run_id")
        out.append(data)
    return out


def said(store: MemoryEventStore, run_id: str = "L-1") -> list[str]:
    return [e.type for e in store.events(run_id)]


@RUNNERS
class TestTheLoanLifecycle:
    """The agent's own tools and decisions move the run through the loan table."""

    def test_a_tool_causes_its_event_and_the_run_waits_for_a_person(self, runner: str) -> None:
        """`request_documents` returns `Emit(...)`: the event follows the outcome that
        resolves the batch, in the same append, naming the call; the run returns waiting in
        `documents_requested`, nobody having steered it."""
        store = Batches()
        result = drive(runner, store, loan_script(), loan_tools())
        assert (result.status, result.waiting, result.kind) == (
            "documents_requested",
            True,
            "waiting",
        )
        assert result.record.custom == {"requested": ["payslip", "id"]}
        events = log(store)
        completed = [e for e in events if e["type"] == "tool.completed"]
        assert [e["action_id"] for e in completed] == ["t1.1", "t1.2"]
        assert completed[1]["emit"] == {
            "type": "loan.documents_requested",
            "fields": {"documents": ["payslip", "id"]},
        }
        assert events[-1] == {
            "sequence": len(events),
            "type": "loan.documents_requested",
            "emitted_by": {"action_id": "t1.2"},
            "documents": ["payslip", "id"],
        }
        # Persist before act: the event is in the commit of the outcome that resolved the batch.
        assert store.batches[-1] == ["tool.completed", "loan.documents_requested"]
        action = result.record.actions["t1.2"]
        assert (action.emitted, action.refusal) == (len(events), None)

    def test_people_answer_and_the_model_sends_it_to_underwriting(self, runner: str) -> None:
        """Documents arrive (a person's event): the model reads them and decides
        `loan.sent_to_underwriting`, appended with its decision; the underwriter approves
        (the table's condition reads the event's field) and the run ends `approved`."""
        store = Batches()
        model = loan_script()
        drive(runner, store, model, loan_tools())
        append_event(store, "L-1", "loan.documents_received", document_ids=["D-1", "D-2"])
        result = drive(runner, store, model, loan_tools(), resume=True)
        assert (result.status, result.waiting) == ("underwriting", True)
        assert store.batches[-1] == ["model.completed", "loan.sent_to_underwriting"]
        decided, caused = log(store)[-2:]
        assert decided["decision"] == "emit"
        assert decided["emit"] == {
            "type": "loan.sent_to_underwriting",
            "fields": {"summary": "score 712, documents D-1, D-2"},
        }
        assert caused == {
            "sequence": decided["sequence"] + 1,
            "type": "loan.sent_to_underwriting",
            "emitted_by": {"turn": 2},
            "summary": "score 712, documents D-1, D-2",
        }
        second = model.contexts[-1]
        assert [(a.action_id, a.emit is not None, a.refusal) for a in second.results] == [
            ("t1.1", False, None),
            ("t1.2", True, None),
        ]
        append_event(store, "L-1", "loan.underwriter_decision", decision="approve", amount=9000)
        result = drive(runner, store, model, loan_tools(), resume=True)
        assert (result.status, result.kind) == ("approved", "terminal")
        assert result.record.custom == {
            "requested": ["payslip", "id"],
            "received": ["D-1", "D-2"],
            "decision": "approve",
            "amount": 9000,
        }
        assert said(store).count("model.started") == 2
        assert store.verify("L-1").ok

    def test_a_small_loan_is_approved_by_the_decision_itself(self, runner: str) -> None:
        """A condition reads the emitted event's own field: `amount` under the limit takes
        `loan.sent_to_underwriting` straight to `approved`, and the run ends there."""
        store = Batches()
        model = ScriptedModel(
            [Decision.emit(Emit("loan.sent_to_underwriting", summary="small", amount=500))]
        )
        result = drive(runner, store, model, loan_tools())
        assert (result.status, said(store)[-2:]) == (
            "approved",
            ["model.completed", "loan.sent_to_underwriting"],
        )


@RUNNERS
class TestRefusals:
    """What the table or the type refuses is recorded as refused, never applied, never a
    crash; the model reads why on its next turn, with what was allowed."""

    def test_an_event_the_state_forbids_is_refused_with_what_was_allowed(self, runner: str) -> None:
        """Two calls ask for documents in one batch: the first one's event moves the run to
        `documents_requested`, where the table has no move for the second one's: it is
        `emit.refused` in the same append, and the model's next turn reads it."""
        store = Batches()
        model = ScriptedModel(
            [
                Decision.call_tools(
                    ProposedCall("request_documents", {"documents": ["payslip"]}),
                    ProposedCall("request_documents", {"documents": ["id"]}),
                ),
                Decision.answer("Waiting for the applicant."),
            ]
        )
        result = drive(runner, store, model, loan_tools())
        assert result.status == "documents_requested"
        assert store.batches[-1] == [
            "tool.completed",
            "loan.documents_requested",
            "emit.refused",
        ]
        refused = log(store)[-1]
        assert refused["action_id"] == "t1.2"
        assert refused["refusal"] == {
            "kind": "not_allowed",
            "message": "'loan.documents_requested' is not allowed where the run stands "
            "('documents_requested'); events of its lifecycle allowed there: "
            "'loan.documents_received'",
            "proposed": {"calls": 0, "tools": {}, "event": "loan.documents_requested"},
            "allowed": ["loan.documents_received"],
        }
        append_event(store, "L-1", "loan.documents_received", document_ids=["D-1"])
        result = drive(runner, store, model, loan_tools(), resume=True)
        assert result.status == "completed"
        first, second = model.contexts[-1].results
        assert (first.emitted, first.refusal) == (10, None)
        assert second.refusal is not None
        assert (second.refusal.kind, second.refusal.allowed) == (
            "not_allowed",
            ["loan.documents_received"],
        )

    def test_fields_that_fail_the_type_are_refused_with_the_outcome(self, runner: str) -> None:
        """`documents` must be a list: the call's outcome is recorded, and its refusal with
        it in one append (nothing is left to judge); the run goes on."""
        store = Batches()

        def sloppy(ctx: ToolContext) -> ToolResult:
            return ToolResult("asked", emit=Emit("loan.documents_requested", documents="id"))

        tools = [Tool("request_documents", sloppy, emits=("loan.documents_requested",))]
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("request_documents")), Decision.answer("ok")]
        )
        result = drive(runner, store, model, tools)
        assert result.status == "completed"
        assert ["tool.completed", "emit.refused"] in [b[:2] for b in store.batches]
        completed = next(e for e in log(store) if e["type"] == "tool.completed")
        assert "emit" not in completed
        assert completed["result"] == "asked"
        refusal = model.contexts[1].results[0].refusal
        assert refusal is not None
        assert (refusal.kind, refusal.message) == (
            "invalid_fields",
            "the fields of 'loan.documents_requested' are invalid: at documents: Input "
            "should be a valid array",
        )

    def test_a_proposal_is_bounded_like_any_event(self, runner: str) -> None:
        """Fields too large for an event, or a result and fields too large together for the
        outcome that carries them: refused, with a sentence that says so; the result is
        kept, the log stays small beside it."""
        store = Batches()
        big = "x" * (5 * 1024 * 1024)

        def huge(ctx: ToolContext) -> ToolResult:
            documents = [big, big] if ctx.args["alone"] else [big]
            result = None if ctx.args["alone"] else big
            return ToolResult(result, emit=Emit("loan.documents_requested", documents=documents))

        tools = [Tool("huge", huge, emits=("loan.documents_requested",))]
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("huge", {"alone": True})),
                Decision.call_tools(ProposedCall("huge", {"alone": False})),
                Decision.answer("ok"),
            ]
        )
        result = drive(runner, store, model, tools)
        assert result.status == "completed"
        alone, together = (model.contexts[i].results[0].refusal for i in (1, 2))
        assert alone is not None
        assert together is not None
        assert (alone.kind, alone.message) == (
            "invalid_fields",
            "the fields of 'loan.documents_requested' cannot be stored: the value is "
            "10,485,783 bytes of JSON; an event holds at most 8,388,608",
        )
        assert (together.kind, together.message) == (
            "invalid_fields",
            "the fields of 'loan.documents_requested' cannot be stored beside the call's "
            "result: together they are 10,485,803 bytes of JSON; an event holds at most "
            "8,388,608",
        )
        assert result.record.actions["t2.1"].result == big
        refusals = [e for e in store.events("L-1") if e.type == "emit.refused"]
        assert [len(dump_event(e)) < 1_000 for e in refusals] == [True, True]

    def test_a_type_the_tool_does_not_declare_is_refused(self, runner: str) -> None:
        """A tool that declares no events proposes one: `undeclared`, and nothing moves."""
        store = Batches()

        def eager(ctx: ToolContext) -> Emit:
            return Emit("loan.sent_to_underwriting", summary="me")

        model = ScriptedModel([Decision.call_tools(ProposedCall("eager")), Decision.answer("ok")])
        result = drive(runner, store, model, [Tool("eager", eager)])
        assert result.status == "completed"
        refusal = model.contexts[1].results[0].refusal
        assert refusal is not None
        assert (refusal.kind, refusal.message, refusal.allowed) == (
            "undeclared",
            "'loan.sent_to_underwriting' is not among the events this tool declares it may "
            "propose: none",
            [],
        )
        assert "loan.sent_to_underwriting" not in said(store)

    def test_a_built_in_or_unknown_type_is_no_proposal(self, runner: str) -> None:
        """The runtime appends built-in events itself: `run.completed` proposed by the model
        is refused (`unknown_event`), as is a type the table does not have."""
        store = Batches()
        model = ScriptedModel(
            [
                Decision.emit(Emit("run.completed")),
                Decision.emit(Emit("loan.teleported")),
                Decision.answer("ok"),
            ]
        )
        result = drive(runner, store, model, loan_tools())
        assert result.status == "completed"
        own = (
            "'loan.documents_received', 'loan.documents_requested', 'loan.noted', "
            "'loan.sent_to_underwriting', 'loan.underwriter_decision'"
        )
        first, second = (model.contexts[i].refusal for i in (1, 2))
        assert first is not None
        assert second is not None
        assert (first.kind, first.message) == (
            "unknown_event",
            f"'run.completed' is built in: the runtime appends it itself; its own event "
            f"types: {own}",
        )
        assert second.message == (
            f"'loan.teleported' is not an event type of the run's table; its own event types: {own}"
        )
        assert said(store).count("run.completed") == 1

    def test_a_decision_the_state_forbids_is_refused_alone(self, runner: str) -> None:
        """The model decides the underwriter's event while the run is `running`: the
        decision is recorded `refused` (and nothing else), its usage kept; the next turn
        reads why and what it may cause instead."""
        store = Batches()
        model = ScriptedModel(
            [
                Decision.emit(
                    Emit("loan.underwriter_decision", decision="approve"),
                    usage={"input_tokens": 10, "output_tokens": 3},
                ),
                Decision.answer("ok"),
            ]
        )
        result = drive(runner, store, model, loan_tools())
        assert result.status == "completed"
        assert ["model.completed"] in store.batches
        refused = next(e for e in log(store) if e.get("decision") == "refused")
        assert refused["usage"] == {"input_tokens": 10, "output_tokens": 3, "cost": 0.0}
        assert refused["refusal"] == {
            "kind": "not_allowed",
            "message": "'loan.underwriter_decision' is not allowed where the run stands "
            "('running'); events of its lifecycle allowed there: "
            "'loan.documents_requested', 'loan.noted', 'loan.sent_to_underwriting'",
            "proposed": {
                "decision": "emit",
                "calls": 0,
                "tools": {},
                "event": "loan.underwriter_decision",
            },
            "allowed": ["loan.documents_requested", "loan.noted", "loan.sent_to_underwriting"],
        }
        seen = model.contexts[1].refusal
        assert seen is not None
        assert seen.allowed == [
            "loan.documents_requested",
            "loan.noted",
            "loan.sent_to_underwriting",
        ]
        assert "loan.underwriter_decision" not in said(store)
        assert result.record.usage.input_tokens == 10

    def test_a_decision_with_fields_that_fail_the_type_is_refused(self, runner: str) -> None:
        """`summary` is required: the decision is refused before anything of it is built."""
        store = Batches()
        model = ScriptedModel(
            [Decision.emit(Emit("loan.sent_to_underwriting")), Decision.answer("ok")]
        )
        result = drive(runner, store, model, loan_tools())
        assert result.status == "completed"
        refusal = model.contexts[1].refusal
        assert refusal is not None
        assert (refusal.kind, refusal.message) == (
            "invalid_fields",
            "the fields of 'loan.sent_to_underwriting' are invalid: at summary: Field required",
        )


class TestDeclarations:
    """A tool's `emits` are checked against the table when the Runner is built."""

    def test_a_runner_refuses_a_tool_that_declares_what_the_table_lacks(self) -> None:
        """Every problem at once: a type the table does not have, and a built-in one."""
        tools = [
            Tool("a", lambda ctx: None, emits=("loan.teleported",)),
            Tool("b", lambda ctx: None, emits=("run.completed", "loan.documents_requested")),
        ]
        store = Batches()
        with pytest.raises(ValueError, match=r"^tool 'a' of agent 'loans' declares") as caught:
            Runner(store, Agent("loans", ScriptedModel([]), tools))
        assert str(caught.value) == (
            "tool 'a' of agent 'loans' declares 'loan.teleported': not an event type of table "
            "'loan_application' (its own: 'loan.documents_received', "
            "'loan.documents_requested', 'loan.noted', 'loan.sent_to_underwriting', "
            "'loan.underwriter_decision'); tool 'b' of agent 'loans' declares "
            "'run.completed': a built-in event the runtime appends itself"
        )

    def test_emits_names_event_types(self) -> None:
        """A bad declaration is refused where the tool is made."""
        with pytest.raises(ValueError, match=r"^emits names event types") as caught:
            Tool("a", lambda ctx: None, emits=("",))
        assert str(caught.value) == "emits names event types (non-empty strings), got ['']"


class TestRecovery:
    """A crash between a batch's last outcome and its events: the next driver judges them
    from the record, never from memory."""

    def test_the_planner_applies_what_the_record_left_unjudged(self) -> None:
        """A log whose batch resolved with a proposal and no event after it (written one
        event per append, as another writer may): `drive` appends the event first."""
        store = Batches()
        build = LogBuilder("L-9", events=LOAN_TABLE.event_types)
        build.add("run.started", table=LOAN_TABLE.ref.model_dump(), agent="loans")
        build.add("model.started")
        asked = {
            "action_id": "t1.1",
            "tool": "request_documents",
            "arguments": {"documents": ["id"]},
        }
        build.add("model.completed", decision="tool_calls", tool_calls=[asked])
        build.add("tool.requested", **asked)
        build.add("tool.started", action_id="t1.1")
        build.add(
            "tool.completed",
            action_id="t1.1",
            emit={"type": "loan.documents_requested", "fields": {"documents": ["id"]}},
        )
        for event in build.events:
            store.append("L-9", [event], event.sequence - 1)
        result = drive("sync", store, ScriptedModel([]), loan_tools(), "L-9", resume=True)
        assert (result.status, store.batches[-1]) == (
            "documents_requested",
            ["loan.documents_requested"],
        )
        assert log(store, "L-9")[-1] == {
            "sequence": 7,
            "type": "loan.documents_requested",
            "emitted_by": {"action_id": "t1.1"},
            "documents": ["id"],
        }
