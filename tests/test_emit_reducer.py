"""The wire format and the reducer's rules for events a call or a decision proposes (`emit`).

A call's proposal is durable on its `tool.completed` (`emit`); the event it makes names the
call (`emitted_by`), and the reducer checks the claim: that very event, the batch resolved,
the batch's proposals in the batch's order, each applied or refused (`emit.refused`) once.
A decision's proposal (`model.completed` decision `emit`) is followed by its event at the
same turn. While a proposal waits, the model cannot be called; a run that ends first settles
what is left as refused.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentfsm.errors import EventFormatError, LifecycleError
from agentfsm.events import EmittedBy, LogBuilder, ProposedEvent, Refusal, parse_event
from agentfsm.fsm import DEFAULT_TABLE, Transition
from agentfsm.fsm.table import table_problems
from agentfsm.record import RunRecord
from agentfsm.reducers import Reducer
from agentfsm.reducers.snapshot import Snapshot
from agentfsm.runtime import append_event, submit
from examples.lifecycles.ticket import TICKET_TABLE
from tests.fixtures.emit_loan import LOAN_TABLE, loan_store

REDUCER = Reducer(LOAN_TABLE)
NOTE = {"type": "loan.noted", "fields": {"text": "n"}}
REFUSAL = {
    "kind": "not_allowed",
    "message": "no",
    "proposed": {"event": "loan.noted"},
    "allowed": [],
}


def resolved_batch(*emits: dict[str, Any] | None) -> LogBuilder:
    """A loan run whose one decision called `len(emits)` tools, all completed, the i-th
    proposing `emits[i]` (None: nothing)."""
    log = LogBuilder("L-1", events=LOAN_TABLE.event_types)
    log.add("run.started", table=LOAN_TABLE.ref.model_dump())
    log.add("model.started")
    calls = [
        {"action_id": f"t1.{i + 1}", "tool": "note", "arguments": {}} for i in range(len(emits))
    ]
    log.add("model.completed", decision="tool_calls", tool_calls=calls)
    for c in calls:
        log.add("tool.requested", **c)
    for i, emit in enumerate(emits):
        log.add("tool.started", action_id=f"t1.{i + 1}")
        log.add("tool.completed", action_id=f"t1.{i + 1}", **({"emit": emit} if emit else {}))
    return log


def fold(log: LogBuilder, reducer: Reducer = REDUCER) -> RunRecord:
    return reducer.replay(log.events)


def next_event(record: RunRecord, type_: str, **fields: Any) -> Any:
    """An event of `type_` as the next of `record`'s run (not kept in any log)."""
    data = {"type": type_, "run_id": record.run_id, "sequence": record.version + 1}
    at = "2026-09-01T11:00:00+00:00"
    return parse_event({**data, "occurred_at": at, **fields}, events=LOAN_TABLE.event_types)


def refused(record: RunRecord, event: Any, reducer: Reducer = REDUCER) -> str:
    """The whole message the reducer refuses `event` with after `record`."""
    with pytest.raises(LifecycleError) as caught:
        reducer.reduce(record, event)
    return str(caught.value)


#: The loan table where a note may also come while calls run (so the reducer's own rule,
#: not the table, is what refuses a claim made before the batch is resolved).
NOTES_ANYTIME = Reducer(
    LOAN_TABLE.derive(
        name="notes_anytime", add=[Transition("waiting_tool", "loan.noted", "waiting_tool")]
    )
)


class TestWire:
    """The new parts of the wire format refuse what they cannot mean."""

    def test_a_proposal_cannot_name_the_envelope(self) -> None:
        """The writer stamps the envelope and the runtime `emitted_by`: never proposed."""
        with pytest.raises(ValidationError) as caught:
            ProposedEvent(type="loan.noted", fields={"run_id": "x", "emitted_by": {}})
        assert caught.value.errors()[0]["msg"] == (
            "Value error, fields 'emitted_by', 'run_id' are stamped by the runtime, not proposed"
        )

    def test_emitted_by_names_a_call_or_a_turn(self) -> None:
        """Exactly one of the two."""
        for wrong in ({}, {"action_id": "t1.1", "turn": 1}):
            with pytest.raises(ValidationError) as caught:
                EmittedBy.model_validate(wrong)
            assert caught.value.errors()[0]["msg"] == (
                "Value error, 'emitted_by' names exactly one of 'action_id' and 'turn'"
            )

    def test_an_emit_decision_carries_its_event_and_only_it_does(self) -> None:
        """`decision: emit` needs `emit`; another decision cannot carry one."""
        log = LogBuilder("L-1", events=LOAN_TABLE.event_types)
        log.add("run.started")
        log.add("model.started")
        with pytest.raises(EventFormatError) as caught:
            log.add("model.completed", decision="emit")
        assert "decision 'emit' needs an 'emit'" in str(caught.value)
        with pytest.raises(EventFormatError) as caught:
            log.add("model.completed", decision="final", emit=NOTE)
        assert "decision 'final' cannot carry an 'emit'" in str(caught.value)

    def test_emit_refused_is_on_no_edge(self) -> None:
        """As `run.migrated`: a table may not put it on an edge."""
        problems = table_problems(
            DEFAULT_TABLE.states,
            DEFAULT_TABLE.initial,
            [*DEFAULT_TABLE.transitions, Transition("running", "emit.refused", "running")],
            DEFAULT_TABLE.event_types,
        )
        assert problems == [
            "edge running --emit.refused--> running: 'emit.refused' cannot be on an edge "
            "(a refused emit keeps the run's state, in any state that has not ended)"
        ]

    def test_tables_keep_their_digests(self) -> None:
        """`emitted_by` is envelope, left out of the digest: runs stored before it still
        fold with their tables (the default table and the shipped ticket table)."""
        assert DEFAULT_TABLE.digest == (
            "sha256:3a8d78b732de41c02e45913d9a1a46549b22481209f5dec8e221b369f80e0391"
        )
        assert TICKET_TABLE.digest == (
            "sha256:a1e852ce755ff88c869d3b8b762d275f57f954ef5b6e6f42fb497bf4c4b99d4d"
        )


class TestClaims:
    """An event that says a call proposed it is checked against the call's proposal."""

    def test_the_proposed_event_is_applied_once(self) -> None:
        """Applied: the call records where; the same claim again is refused."""
        log = resolved_batch(NOTE)
        log.add("loan.noted", text="n", emitted_by={"action_id": "t1.1"})
        record = fold(log)
        assert (record.actions["t1.1"].emitted, record.custom) == (7, {"notes": ["n"]})
        again = log.add("loan.noted", text="n", emitted_by={"action_id": "t1.1"})
        assert refused(record, again) == (
            "run 'L-1' is 'running': event 'loan.noted' (sequence 8) for action 't1.1' is "
            "refused: the event its call proposed was applied at sequence 7"
        )

    def test_another_event_than_the_proposed_one_is_refused(self) -> None:
        """Other fields than proposed: refused, naming the proposal."""
        log = resolved_batch(NOTE)
        record = fold(log)
        forged = log.add("loan.noted", text="forged", emitted_by={"action_id": "t1.1"})
        assert refused(record, forged) == (
            "run 'L-1' is 'running': event 'loan.noted' (sequence 7) for action 't1.1' is "
            "refused: the event differs from the one its call proposed ('loan.noted' with "
            'fields {"text":"n"})'
        )

    def test_a_call_that_proposed_nothing_causes_nothing(self) -> None:
        """A claim naming a call without a proposal, or no call at all, is refused."""
        log = resolved_batch(None)
        record = fold(log)
        for aid, reason in (
            ("t1.1", "its call proposed no event"),
            ("t9.9", "no such call proposed an event"),
        ):
            event = next_event(record, "loan.noted", text="n", emitted_by={"action_id": aid})
            assert refused(record, event) == (
                f"run 'L-1' is 'running': event 'loan.noted' (sequence 7) for action '{aid}' "
                f"is refused: {reason}"
            )

    def test_nothing_is_judged_before_the_batch_is_resolved(self) -> None:
        """A call's event waits for the batch's other calls."""
        log = LogBuilder("L-1", events=LOAN_TABLE.event_types)
        log.add("run.started")
        log.add("model.started")
        calls = [{"action_id": f"t1.{i}", "tool": "n", "arguments": {}} for i in (1, 2)]
        log.add("model.completed", decision="tool_calls", tool_calls=calls)
        for c in calls:
            log.add("tool.requested", **c)
        log.add("tool.started", action_id="t1.1")
        log.add("tool.started", action_id="t1.2")
        log.add("tool.completed", action_id="t1.1", emit=NOTE)
        record = fold(log, NOTES_ANYTIME)
        early = log.add("loan.noted", text="n", emitted_by={"action_id": "t1.1"})
        assert refused(record, early, NOTES_ANYTIME) == (
            "run 'L-1' is 'waiting_tool': event 'loan.noted' (sequence 9) for action 't1.1' "
            "is refused: its batch is not resolved: call 't1.2' is 'started'"
        )

    def test_a_batch_is_judged_in_its_order(self) -> None:
        """The second call's event cannot come before the first's judgement."""
        log = resolved_batch(NOTE, {"type": "loan.noted", "fields": {"text": "second"}})
        record = fold(log)
        jump = log.add("loan.noted", text="second", emitted_by={"action_id": "t1.2"})
        assert refused(record, jump) == (
            "run 'L-1' is 'running': event 'loan.noted' (sequence 10) for action 't1.2' is "
            "refused: the event call 't1.1' proposed comes first (batch order)"
        )

    def test_a_decision_claims_its_own_turn(self) -> None:
        """The event follows the decision that proposed it, at its turn."""
        log = LogBuilder("L-1", events=LOAN_TABLE.event_types)
        log.add("run.started")
        log.add("model.started")
        log.add("model.completed", decision="emit", emit=NOTE)
        record = fold(log)
        assert record.decided_emit == ProposedEvent.model_validate(NOTE)
        wrong = next_event(record, "loan.noted", text="n", emitted_by={"turn": 2})
        assert refused(record, wrong) == (
            "run 'L-1' is 'running': event 'loan.noted' (sequence 4) is refused: the decision "
            "of turn 2 proposed no event now due"
        )
        log.add("loan.noted", text="n", emitted_by={"turn": 1})
        after = fold(log)
        assert (after.decided_emit, after.custom) == (None, {"notes": ["n"]})


class TestWaiting:
    """A proposal still to judge holds the model back; the end of a run settles it."""

    def test_the_model_is_not_called_while_a_proposal_waits(self) -> None:
        """`model.started` is refused until the call's event is applied or refused."""
        log = resolved_batch(NOTE)
        record = fold(log)
        assert refused(record, log.add("model.started")) == (
            "run 'L-1' is 'running': event 'model.started' (sequence 7) for action 't1.1' is "
            "refused: the model cannot be called before the event its call proposed "
            "('loan.noted') is applied or refused"
        )

    def test_a_refusal_is_recorded_once_and_the_run_stays(self) -> None:
        """`emit.refused` keeps the state; a second one, or one in an ended run, is refused."""
        log = resolved_batch(NOTE)
        log.add("emit.refused", action_id="t1.1", refusal=REFUSAL)
        record = fold(log)
        assert record.status == "running"
        assert record.actions["t1.1"].refusal == Refusal.model_validate(REFUSAL)
        twice = next_event(record, "emit.refused", action_id="t1.1", refusal=REFUSAL)
        assert refused(record, twice) == (
            "run 'L-1' is 'running': event 'emit.refused' (sequence 8) for action 't1.1' is "
            "refused: the event its call proposed was refused already"
        )
        log.add("model.started")  # the model may be called again
        log.add("run.failed", error={"kind": "x", "message": "y"})
        ended = fold(log)
        late = next_event(ended, "emit.refused", action_id="t1.1", refusal=REFUSAL)
        assert refused(ended, late) == (
            "run 'L-1' is 'failed' (terminal): event 'emit.refused' (sequence 10) is not "
            "allowed; allowed: none"
        )

    def test_a_person_may_act_while_a_proposal_waits(self) -> None:
        """A person's event (no `emitted_by`) is any steering event: the proposal is then
        judged where the run stands after it."""
        log = resolved_batch({"type": "loan.documents_requested", "fields": {"documents": []}})
        log.add("loan.noted", text="by a person")
        record = fold(log)
        assert record.actions["t1.1"].emit_pending

    def test_a_run_that_ends_first_settles_what_waits(self) -> None:
        """The proposal is refused `run_ended`, naming the state the run ended in."""
        log = resolved_batch(NOTE)
        log.add("run.terminated", stop_reason="deadline")
        action = fold(log).actions["t1.1"]
        assert action.refusal == Refusal(
            kind="run_ended",
            message="the run ended ('terminated') before the event was judged",
            proposed={"event": "loan.noted"},  # type: ignore[arg-type]
        )
        assert not action.emit_pending

    def test_the_record_round_trips_with_its_proposals(self) -> None:
        """Snapshots keep proposals, their sequences and refusals."""
        log = resolved_batch(NOTE, NOTE)
        log.add("loan.noted", text="n", emitted_by={"action_id": "t1.1"})
        log.add("emit.refused", action_id="t1.2", refusal=REFUSAL)
        record = fold(log)
        assert RunRecord.loads(record.dumps()) == record
        assert Snapshot.loads(Snapshot(record).dumps()).record == record


class TestSteering:
    """A person's append carries no `emitted_by`: the runtime stamps it."""

    def test_append_event_refuses_emitted_by(self) -> None:
        """Given as a field, it is refused by name, and nothing is written."""
        store = loan_store()
        submit(store, "L-1")
        with pytest.raises(EventFormatError) as caught:
            append_event(store, "L-1", "loan.noted", text="x", emitted_by={"turn": 1})
        assert caught.value.problems == (
            "field 'emitted_by' is set by the runtime (what proposed the event); leave it out",
        )
        assert store.load("L-1").version == 1


#: One attempt a writer makes after the batch resolved: apply or refuse call i's proposal.
Attempt = tuple[str, int]


@settings(max_examples=200, deadline=None)
@given(
    emits=st.lists(st.booleans(), min_size=1, max_size=5),
    attempts=st.lists(
        st.tuples(st.sampled_from(["apply", "refuse"]), st.integers(0, 4)), max_size=12
    ),
)
def test_each_proposal_is_judged_at_most_once_in_batch_order(
    emits: list[bool], attempts: list[Attempt]
) -> None:
    """Whatever a writer tries, each call's proposal is applied or refused at most once,
    and the judgements the reducer accepts come in the batch's order."""
    record = fold(resolved_batch(*(NOTE if e else None for e in emits)))
    judged: list[int] = []
    caused: list[Any] = []
    for what, i in attempts:
        aid = f"t1.{i + 1}"
        if what == "apply":
            by = {"action_id": aid}
            event = next_event(record, "loan.noted", text="n", emitted_by=by)
        else:
            event = next_event(record, "emit.refused", action_id=aid, refusal=REFUSAL)
        try:
            record = REDUCER.reduce(record, event)
        except LifecycleError:
            continue
        if what == "apply":
            caused.append(event.emitted_by)
        if i < len(emits) and emits[i]:
            judged.append(i)
    proposing = [i for i, e in enumerate(emits) if e]
    assert judged == proposing[: len(judged)]
    for i, action in enumerate(record.actions.values()):
        applied = action.emitted is not None
        assert not (applied and action.refusal is not None)
        assert caused.count(EmittedBy(action_id=f"t1.{i + 1}")) == int(applied)
