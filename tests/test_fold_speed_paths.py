"""The fold's shortcuts make exactly the records the plain steps they stand in for make.

- `put_all` copies a small dict ledger once for a whole batch: the same mapping, of the same
  type and order, as one `put` per action;
- `Reducer.initial` copies a blank record: the one `RunRecord(...)` makes;
- `model.completed` reads `refusal` and `emit` only for the decisions that may carry them;
- `Reducer.reduce` fills only `entered_at` when a run enters a state under a table with no
  timed edge and the run waited on none: the same record as the full `entered` step.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentfsm.errors import ActionError, EventFormatError
from agentfsm.events import Event, make_event
from agentfsm.events.models import ModelCompleted, Proposal, ProposedEvent, Refusal, ToolCall
from agentfsm.ledger import SMALL, Ledger, put, put_all
from agentfsm.record import Action, RunRecord, Timeout
from agentfsm.reducers import DEFAULT_REDUCER, Reducer
from agentfsm.reducers._changes import FRESH_FIELDS
from agentfsm.testing import legal_runs, scripted_run
from tests.fixtures.loan import LOAN_TABLE

SETTINGS = settings(max_examples=150, deadline=None)


def _action(aid: str, status: str = "proposed") -> Action:
    return Action(aid, "search", {"q": aid}, status)


@SETTINGS
@given(
    st.integers(0, SMALL + 2),
    st.lists(st.integers(0, SMALL + 8), max_size=12),
    st.sampled_from(["proposed", "requested", "succeeded"]),
)
@example(SMALL, [SMALL], "proposed")  # one more: a `Ledger`
@example(SMALL - 1, [SMALL - 1], "proposed")  # exactly SMALL: still a dict
@example(SMALL - 1, [SMALL, 0], "requested")  # SMALL, then a change: a `Ledger`
def test_put_all_is_one_put_per_action(size: int, ids: list[int], status: str) -> None:
    """Ids already held and new ones, around the size where a dict becomes a `Ledger`."""
    actions: dict[str, Action] = {f"a{i}": _action(f"a{i}") for i in range(size)}
    changed = [_action(f"a{i}", status) for i in ids]
    one_by_one: Any = actions
    for action in changed:
        one_by_one = put(one_by_one, action)
    at_once = put_all(actions, changed)
    assert type(at_once) is type(one_by_one)
    assert list(at_once.items()) == list(one_by_one.items())
    assert len(actions) == size  # the ledger it was given is left as it was


def test_put_all_on_a_ledger_stays_a_ledger() -> None:
    held = Ledger([_action(f"a{i}") for i in range(SMALL + 1)])
    new = put_all(held, [_action("a0", "requested"), _action("b")])
    assert isinstance(new, Ledger)
    assert list(new)[-1] == "b"
    assert new["a0"].status == "requested"
    assert held["a0"].status == "proposed"


def _fold(reducer: Reducer, events: list[Event]) -> list[RunRecord]:
    record = reducer.initial(events[0].run_id)
    records = []
    for event in events:
        record = reducer.reduce(record, event)
        records.append(record)
    return records


@SETTINGS
@given(legal_runs())
def test_entering_a_state_without_timeouts_is_the_full_step(events: list[Event]) -> None:
    """The default table times out nowhere: the shortcut's records, event by event, are the
    ones the full step (`entered`, asked for every state) makes."""
    assert not DEFAULT_REDUCER._timed
    full = Reducer()
    full._timed = True  # every change of state takes the full step
    shortcut = _fold(DEFAULT_REDUCER, events)
    assert shortcut == _fold(full, events)
    assert [r.entered_at for r in shortcut] == [r.entered_at for r in _fold(full, events)]


def test_a_timeout_carried_in_is_cleared_on_entering_a_state() -> None:
    """A record that waits on a timeout (a snapshot taken under a table with timed edges)
    takes the full step under a table with none: entering another state clears it."""
    events = scripted_run("r", 1)
    record = DEFAULT_REDUCER.initial("r")
    for event in events:
        after = DEFAULT_REDUCER.reduce(record, event)
        if record.version and after.status != record.status:
            break
        record = after
    else:
        raise AssertionError("the scripted run never changes state")
    waiting = attrs.evolve(record, timeout=Timeout("run.failed", "2030-01-01T00:00:00Z"))
    entered = DEFAULT_REDUCER.reduce(waiting, event)
    assert entered.timeout is None
    assert entered.entered_at == event.occurred_at
    assert entered == attrs.evolve(after, timeout=None)


def test_a_decision_that_repeats_an_id_within_itself_is_refused() -> None:
    """The batch joins the ledger at once, and an id repeated within the decision is still
    refused by the reducer (the wire refuses it first; a model built in Python need not)."""
    at = "2026-01-01T00:00:00Z"
    record = DEFAULT_REDUCER.initial("r")
    for event in (
        make_event("run.started", run_id="r", sequence=1, occurred_at=at),
        make_event("model.started", run_id="r", sequence=2, occurred_at=at),
    ):
        record = DEFAULT_REDUCER.reduce(record, event)
    call = ToolCall(action_id="t1", tool="search", arguments={})
    twice = ModelCompleted.model_construct(
        run_id="r", sequence=3, occurred_at=at, type="model.completed",
        decision="tool_calls", tool_calls=[call, call], usage=None, output=None,
        refusal=None, emit=None, event_id=None, emitted_by=None,
    )  # fmt: skip
    with pytest.raises(ActionError, match="the action id is already used"):
        DEFAULT_REDUCER.reduce(record, twice)


def test_a_new_run_is_the_record_the_class_makes() -> None:
    """`initial` copies a blank record: equal to the one `RunRecord(...)` builds, with
    mappings of its own (the fields whose default is a factory are the ones it renews)."""
    factories = [f.name for f in attrs.fields(RunRecord) if isinstance(f.default, attrs.Factory)]
    assert tuple(factories) == FRESH_FIELDS
    for reducer in (DEFAULT_REDUCER, Reducer(LOAN_TABLE)):
        one, two = reducer.initial("r1"), reducer.initial("r2")
        assert one == RunRecord(run_id="r1", status=reducer.table.initial)
        assert type(one) is RunRecord
        for name in FRESH_FIELDS:
            assert getattr(one, name) == {}
            assert getattr(one, name) is not getattr(two, name)


@pytest.mark.parametrize("decision", ["final", "tool_calls", "handoff", "emit", "refused"])
def test_a_decision_carries_a_refusal_or_an_event_only_where_the_fold_reads_it(
    decision: str,
) -> None:
    """The fold reads `refusal` only for decision 'refused' and `emit` only for 'emit': the
    model refuses either anywhere else, on the wire and in Python."""
    refusal = Refusal.of("not_allowed", "no", Proposal.of("final", ()))
    emit = ProposedEvent(type="loan.approved")
    base: dict[str, Any] = {"run_id": "r", "sequence": 3, "occurred_at": "2026-01-01T00:00:00Z"}
    if decision == "tool_calls":
        base["tool_calls"] = [{"action_id": "t1", "tool": "search", "arguments": {}}]
    own = {"refused": {"refusal": refusal}, "emit": {"emit": emit}}.get(decision, {})
    for field, value in (("refusal", refusal), ("emit", emit)):
        if field in own:
            continue
        given = {**base, "decision": decision, **own, field: value}
        with pytest.raises(EventFormatError, match=f"cannot carry an? '{field}'"):
            make_event("model.completed", **given)
        with pytest.raises(ValidationError):
            ModelCompleted(**given)
