"""Fuzzing the wire format and the stores: a clear error or success, never anything else.

Properties, over arbitrary JSON-like values (NaN, infinities, lone surrogates, integers of
thousands of digits, deep nesting, repeated keys) and arbitrary text:

- `parse_event` raises `EventFormatError` or returns an event that dumps and reads back
  equal; never another exception;
- an event a store acknowledges reads back, equal, from a fresh handle (`load`, `events`,
  `verify`); an event it cannot hold is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm.errors import EventFormatError
from agentfsm.events import dump_event, make_event, parse_event
from agentfsm.reducers import replay
from agentfsm.stores import SQLiteEventStore
from agentfsm.testing import scripted_run

_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**3995, max_value=10**4400)
    | st.floats()
    | st.text()
    | st.sampled_from(["\ud800", "a\udfffb", "\x00", "\u2028", "\x1b[31m"])
)
_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=12,
)


@st.composite
def _deep(draw: st.DrawFn) -> Any:
    """A value nested around the depth limit (and well past it, sometimes)."""
    depth = draw(st.sampled_from([1, 50, 99, 100, 101, 150, 199, 200, 201, 1000]))
    value: Any = draw(_leaves)
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


_anything = _values | _deep()

ENVELOPE = {"run_id": "r1", "occurred_at": "2026-09-01T10:02:11Z"}


def _text_of(value: Any) -> str | None:
    """JSON text of a value as a careless producer writes it (NaN and all), if Python can."""
    try:
        return json.dumps(value, allow_nan=True)
    except (ValueError, RecursionError):
        return None


@given(_anything)
def test_parse_event_of_any_value_is_an_event_or_a_clear_error(value: Any) -> None:
    """From Python objects and from their text: EventFormatError, or an event that dumps
    and reads back equal."""
    data = {**ENVELOPE, "sequence": 6, "type": "tool.completed", "action_id": "a", "result": value}
    for source in (data, _text_of(data)):
        if source is None:
            continue
        try:
            event = parse_event(source)
        except EventFormatError:
            continue
        assert parse_event(dump_event(event)) == event


@given(st.text() | st.binary().map(lambda b: b.decode("latin-1")))
def test_parse_event_of_any_text_is_an_event_or_a_clear_error(text: str) -> None:
    """Arbitrary text lines never raise anything but EventFormatError."""
    with contextlib.suppress(EventFormatError):
        parse_event(text)


@given(st.lists(st.sampled_from(["sequence", "run_id", "type", "x"]), min_size=1, max_size=3))
def test_a_repeated_key_anywhere_is_refused(keys: list[str]) -> None:
    """Keys written again at the end of a line: a repeated one is refused by name, never
    read as its last value."""
    line = json.dumps({**ENVELOPE, "sequence": 1, "type": "run.resumed"})
    for key in keys:
        line = line[:-1] + f', "{key}": 2}}'
    repeated = next(
        (k for i, k in enumerate(keys) if k in ("sequence", "run_id", "type") or k in keys[:i]),
        None,
    )
    with pytest.raises(EventFormatError) as info:
        parse_event(line)
    if repeated is not None:
        assert f"the key '{repeated}' is repeated" in str(info.value)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(_anything, _anything)
def test_what_a_store_acknowledges_a_fresh_handle_reads_back(
    tmp_path_factory: Any, result: Any, arguments: Any
) -> None:
    """Arguments and a result drawn from anything: either refused before anything is
    stored, or stored and read back equal by a new handle (load, events, verify)."""
    path: Path = tmp_path_factory.mktemp("fuzz") / "runs.db"
    events = scripted_run("r1", 0)
    with SQLiteEventStore(path) as store:
        store.append("r1", events, 0)
        built = []
        try:
            built.append(make_event("model.started", **ENVELOPE, sequence=2))
            call = {"action_id": "a", "tool": "t", "arguments": {"x": arguments}}
            built.append(
                make_event(
                    "model.completed",
                    **ENVELOPE,
                    sequence=3,
                    decision="tool_calls",
                    tool_calls=[call],
                )
            )
            built.append(make_event("tool.requested", **ENVELOPE, sequence=4, **call))
            built.append(make_event("tool.started", **ENVELOPE, sequence=5, action_id="a"))
            built.append(
                make_event("tool.completed", **ENVELOPE, sequence=6, action_id="a", result=result)
            )
        except EventFormatError:
            built = built[:1]
        try:
            store.append("r1", built, 1)
            stored = [*events, *built]
        except EventFormatError:
            stored = events
    with SQLiteEventStore(path) as fresh:
        assert [dump_event(e) for e in fresh.events("r1")] == [dump_event(e) for e in stored]
        assert fresh.load("r1").dumps() == replay(stored).dumps()
        assert fresh.verify("r1").ok
    conn = sqlite3.connect(path)
    lines = [row[0] for row in conn.execute("SELECT data FROM agentfsm_events ORDER BY sequence")]
    conn.close()
    assert [parse_event(line) for line in lines] == stored
