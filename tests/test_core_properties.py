"""Properties of the core over logs generated from the table itself (not hand lists)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm import (
    DEFAULT_TABLE,
    IllegalTransitionError,
    LifecycleError,
    RunRecord,
    dump_event,
    parse_event,
    replay,
)
from agentfsm import record as record_module
from agentfsm.events import EVENT_CLASSES, make_event
from agentfsm.fsm.table import ON_NO_EDGE
from agentfsm.names import EventType
from agentfsm.reducers import DEFAULT_REDUCER, Snapshot
from agentfsm.testing import illegal_steps, legal_runs, scripted_run

SETTINGS = settings(max_examples=150, deadline=None)


@SETTINGS
@given(legal_runs())
def test_legal_logs_always_fold(events: list) -> None:
    """Every generated legal log folds, and the version is the last sequence."""
    record = replay(events)
    assert record.version == events[-1].sequence == len(events)
    assert record.turn == sum(1 for e in events if e.type == "model.started")


@SETTINGS
@given(legal_runs())
def test_replay_is_deterministic_byte_for_byte(events: list) -> None:
    """Same events, same record, same bytes — also after a JSON round trip of the events."""
    again = [parse_event(dump_event(e)) for e in events]
    assert replay(events).dumps() == replay(again).dumps()


@SETTINGS
@given(legal_runs(min_events=2), st.data())
def test_snapshot_at_any_cut_plus_tail_equals_full_replay(
    events: list, data: st.DataObject
) -> None:
    """A snapshot (through JSON) at any cut, folded with the tail, is the full replay."""
    cut = data.draw(st.integers(min_value=1, max_value=len(events) - 1))
    snap = Snapshot.loads(Snapshot(replay(events[:cut])).dumps())
    assert replay(events[cut:], snapshot=snap) == replay(events)


@SETTINGS
@given(legal_runs())
def test_events_and_records_round_trip_through_json(events: list) -> None:
    """parse(dump(e)) == e for every event; RunRecord.loads(dumps(r)) == r at every step."""
    record = DEFAULT_REDUCER.initial(events[0].run_id)
    for event in events:
        assert parse_event(dump_event(event)) == event
        record = DEFAULT_REDUCER.reduce(record, event)
        assert RunRecord.loads(record.dumps()) == record


@SETTINGS
@given(legal_runs())
def test_a_records_text_is_its_dicts_text_with_every_earlier_record_alive(events: list) -> None:
    """`dumps` reuses each action's text while the action lives: with every record of the
    run kept (old and new versions of an action alive at once), dumping each in any order
    still gives the text of its own `to_json()`."""
    records = [DEFAULT_REDUCER.initial(events[0].run_id)]
    for event in events:
        records.append(DEFAULT_REDUCER.reduce(records[-1], event))
        records[-2].dumps()
    for record in [*records[::2], *records[1::2]]:
        assert record.dumps() == _text_of(record.to_json())


def _text_of(data: dict) -> str:
    """What `dumps` promises, spelt out: sorted compact JSON but for the ledger's order."""
    ledger = ",".join(
        json.dumps(k, ensure_ascii=False) + ":" + _sorted(a) for k, a in data["actions"].items()
    )
    rest = _sorted({k: v for k, v in data.items() if k != "actions"})
    return '{"actions":{' + ledger + "}," + rest[1:]


def _sorted(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def test_the_ledger_texts_kept_for_dumps_go_with_their_actions() -> None:
    """What `dumps` keeps per action is dropped with the action: memory stays bounded by
    the records alive, however many runs a process folds and snapshots."""
    kept = record_module._action_texts
    before = len(kept)
    for n in range(20):
        record = replay(scripted_run(f"r{n}", 30))
        record.dumps()
        assert len(kept) > before
    del record
    assert len(kept) == before


@SETTINGS
@given(illegal_steps())
def test_refused_events_raise_and_change_nothing(step: object) -> None:
    """An event the table or the ledger forbids raises, and the record stays as it was."""
    record = step.record  # type: ignore[attr-defined]
    before = record.dumps()
    with pytest.raises(LifecycleError):
        DEFAULT_REDUCER.reduce(record, step.event)  # type: ignore[attr-defined]
    assert record.dumps() == before


@SETTINGS
@given(legal_runs(finished=True), st.sampled_from(sorted(EVENT_CLASSES)))
def test_terminal_states_absorb_every_event(events: list, event_type: str) -> None:
    """After a terminal state, every event type at the next sequence is an illegal transition."""
    record = replay(events)
    assert DEFAULT_TABLE.is_terminal(record.status)
    with pytest.raises(IllegalTransitionError) as info:
        DEFAULT_REDUCER.reduce(record, _any_event(event_type, record))
    assert info.value.terminal
    assert info.value.allowed == ()


@SETTINGS
@given(legal_runs(), st.sampled_from(sorted(EVENT_CLASSES)))
def test_an_event_type_the_table_does_not_allow_is_always_illegal(
    events: list, event_type: str
) -> None:
    """If (state, type) has no edge, whatever the payload, the reducer says so."""
    record = replay(events)
    if event_type in DEFAULT_TABLE.allowed(record.status):
        return
    if event_type in ON_NO_EDGE and not DEFAULT_TABLE.is_terminal(record.status):
        # On no edge: the reducer judges a migration by its tables (test_migration.py), a
        # refused emit by the ledger (test_emit_reducer.py), a fork's mark by its source
        # (test_fork.py), a failed model attempt by the open call (test_model_failed.py).
        return
    with pytest.raises(IllegalTransitionError) as info:
        DEFAULT_REDUCER.reduce(record, _any_event(event_type, record))
    assert (info.value.state, info.value.event) == (record.status, event_type)
    assert info.value.allowed == DEFAULT_TABLE.allowed(record.status)


_MINIMAL = {
    EventType.MODEL_COMPLETED: {"decision": "final", "output": "x"},
    EventType.MODEL_FAILED: {"error": {"kind": "http_500", "message": "m", "retryable": True}},
    EventType.HANDOFF: {"to_agent": "b"},
    EventType.TOOL_REQUESTED: {"action_id": "zz", "tool": "t", "arguments": {}},
    EventType.TOOL_STARTED: {"action_id": "zz"},
    EventType.TOOL_COMPLETED: {"action_id": "zz"},
    EventType.TOOL_FAILED: {"action_id": "zz", "error": {"kind": "k", "message": "m"}},
    EventType.TOOL_OUTCOME_UNKNOWN: {"action_id": "zz"},
    EventType.APPROVAL_REQUESTED: {"action_id": "zz", "tool": "t", "arguments": {}},
    EventType.APPROVAL_ACCEPTED: {"action_id": "zz"},
    EventType.APPROVAL_REJECTED: {"action_id": "zz"},
    EventType.RUN_PAUSED: {"reason": "r"},
    EventType.RUN_FAILED: {"error": {"kind": "k", "message": "m"}},
    EventType.RUN_TERMINATED: {"stop_reason": "max_turns"},
    EventType.EMIT_REFUSED: {
        "action_id": "zz",
        "refusal": {"kind": "not_allowed", "message": "m", "proposed": {"event": "x.y"}},
    },
    EventType.RUN_FORKED: {"from_run": "another-run", "from_sequence": 1},
    EventType.USAGE_REPORTED: {"usage": {"cost": 0.5}},
    EventType.RUN_MIGRATED: {
        "from_table": DEFAULT_TABLE.ref.model_dump(),
        "to_table": {"name": "agent_run", "digest": "sha256:" + "0" * 64},
        "by": "ann",
        "reason": "r",
    },
}


def _any_event(event_type: str, record: RunRecord) -> object:
    """A well-formed event of `event_type` at the record's next sequence."""
    fields = json.loads(json.dumps(_MINIMAL.get(EventType(event_type), {})))
    return make_event(
        event_type,
        run_id=record.run_id,
        sequence=record.version + 1,
        occurred_at="2030-01-01T00:00:00Z",
        **fields,
    )
