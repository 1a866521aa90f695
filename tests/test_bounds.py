"""Values that cannot be stored and read back are refused where events are made and parsed.

Each case was acknowledged by `make_event` and a store's `append` before, then broke every
later reader (or the hash chain) after the fact. Text and Python objects meet one set of
limits: what one path accepts, the other does too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm import EventFormatError, dump_event, parse_event
from agentfsm.events import make_event
from agentfsm.events._bounds import MAX_DEPTH, MAX_EVENT_BYTES, MAX_INT_DIGITS

ENVELOPE = {"run_id": "run_1", "sequence": 1, "occurred_at": "2026-09-01T10:02:11+08:00"}


def _completed(result: Any) -> dict[str, Any]:
    return {**ENVELOPE, "type": "tool.completed", "action_id": "t1", "result": result}


def _nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def _python_problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(EventFormatError) as info:
        parse_event(data)
    return list(info.value.problems)


def _text_problems(text: str | bytes) -> list[str]:
    with pytest.raises(EventFormatError) as info:
        parse_event(text)
    return list(info.value.problems)


class TestPythonValues:
    """`make_event` and `parse_event(dict)` refuse what no JSON line can hold."""

    def test_nan_in_a_tool_result(self) -> None:
        """NaN is not JSON: refused, naming the field and where inside it."""
        problems = _python_problems(_completed({"score": [1.0, float("nan")]}))
        assert problems == [
            "field 'result': the value at 'score[1]' is nan, which JSON cannot hold "
            "(numbers must be finite)"
        ]

    def test_infinity_in_tool_arguments(self) -> None:
        """An infinite argument of a requested call is refused before anything is stored."""
        with pytest.raises(EventFormatError) as info:
            make_event(
                "tool.requested",
                **ENVELOPE,
                action_id="t1",
                tool="charge",
                arguments={"amount": float("-inf")},
            )
        assert list(info.value.problems) == [
            "field 'arguments': the value at 'amount' is -inf, which JSON cannot hold "
            "(numbers must be finite)"
        ]

    def test_lone_surrogate_in_a_model_output(self) -> None:
        """A string that is not valid Unicode cannot be written as UTF-8: refused."""
        data = {**ENVELOPE, "type": "model.completed", "decision": "final", "output": "a\ud800"}
        assert _python_problems(data) == [
            "field 'output': the value is not valid Unicode (a lone surrogate '\\ud800' at index 1)"
        ]

    def test_lone_surrogate_in_a_run_id(self) -> None:
        """Envelope strings are checked as Unicode too (a run id of '\\ud800')."""
        data = {**ENVELOPE, "run_id": "\ud800", "type": "run.resumed"}
        assert _python_problems(data) == [
            "field 'run_id': Input should be a valid string, unable to parse raw data as a "
            "unicode string (got '\\ud800')"
        ]

    def test_lone_surrogate_in_a_free_text_field(self) -> None:
        """A reason (free text) is no exception."""
        data = {**ENVELOPE, "type": "run.paused", "reason": "\udfff"}
        assert _python_problems(data) == [
            "field 'reason': Input should be a valid string, unable to parse raw data as a "
            "unicode string (got '\\udfff')"
        ]

    def test_integer_too_long_to_print(self) -> None:
        """An integer Python cannot turn into text would break hashing: refused."""
        problems = _python_problems(_completed({"n": 10**MAX_INT_DIGITS}))
        assert problems == [
            f"field 'result': the value at 'n' is an integer of more than {MAX_INT_DIGITS:,} digits"
        ]

    def test_nesting_deeper_than_the_limit(self) -> None:
        """A value nested past MAX_DEPTH is refused (readers stop near 200 levels)."""
        problems = _python_problems(_completed(_nested(MAX_DEPTH + 1)))
        assert len(problems) == 1
        assert problems[0].startswith("field 'result': the value at 'k[0].k[0]")
        assert problems[0].endswith(f"nests deeper than {MAX_DEPTH} levels of arrays and objects")

    def test_nesting_far_past_the_recursion_limit(self) -> None:
        """Ten thousand levels are refused cleanly, never as a RecursionError."""
        value: Any = 1
        for _ in range(10_000):
            value = [value]
        assert _python_problems(_completed(value))[0].endswith(
            f"nests deeper than {MAX_DEPTH} levels of arrays and objects"
        )

    def test_the_deepest_allowed_value_round_trips(self) -> None:
        """At exactly MAX_DEPTH levels the event is accepted and reads back the same."""
        event = parse_event(_completed(_nested(MAX_DEPTH)))
        assert parse_event(dump_event(event)) == event


class TestText:
    """JSON lines are read strictly: what is ambiguous or not JSON is refused."""

    def test_repeated_key_in_the_envelope(self) -> None:
        """`{"sequence":2,"sequence":1}` named the key, instead of silently keeping 1."""
        line = '{"run_id":"r","sequence":2,"sequence":1,"type":"run.resumed","occurred_at":"2026-09-01T10:02:11Z"}'
        assert _text_problems(line) == [
            "not JSON (the key 'sequence' is repeated at line 1 column 39)"
        ]

    def test_repeated_key_in_tool_arguments(self) -> None:
        """Tool arguments with a repeated key are refused: which value was approved?"""
        line = (
            '{"run_id":"r","sequence":1,"type":"tool.requested","occurred_at":"2026-09-01T10:02:11Z",'
            '"action_id":"t1","tool":"pay","arguments":{"amount":1,"amount":1000000}}'
        )
        assert _text_problems(line) == [
            "not JSON (the key 'amount' is repeated at line 1 column 152)"
        ]

    @pytest.mark.parametrize(
        ("token", "column", "named"),
        [("NaN", 135, "NaN"), ("Infinity", 135, "Infinity"), ("-Infinity", 136, "Infinity")],
    )
    def test_non_finite_number_tokens(self, token: str, column: int, named: str) -> None:
        """Python's json module writes NaN and Infinity; JSON has neither, and says so."""
        text = json.dumps(_completed(0)).replace('"result": 0', f'"result": {token}')
        assert _text_problems(text) == [
            f"not JSON ({named} at line 1 column {column}: JSON has no NaN or Infinity)"
        ]

    def test_lone_surrogate_escape(self) -> None:
        """`"\\ud800"` in a line is not a Unicode string."""
        problems = _text_problems(json.dumps(_completed("x")).replace('"x"', '"\\ud800"'))
        assert problems == ["not JSON (unexpected end of hex escape at line 1 column 142)"]

    def test_too_long_integer(self) -> None:
        """An integer of 5,000 digits is refused by the reader, as by the writer."""
        problems = _text_problems(
            json.dumps(_completed(0)).replace('"result": 0', '"result": ' + "9" * 5000)
        )
        assert len(problems) == 1
        assert problems[0].startswith("not JSON (number out of range")

    def test_deep_nesting_is_refused_at_the_same_limit(self) -> None:
        """A line nested past MAX_DEPTH in a value meets the writer's limit, not the parser's."""
        text = json.dumps(_completed(_nested(MAX_DEPTH + 1)))
        assert _text_problems(text)[0].endswith(
            f"nests deeper than {MAX_DEPTH} levels of arrays and objects"
        )

    def test_thousand_levels_are_a_clear_error(self) -> None:
        """~1,000 levels (a RecursionError in the CLI before) is one clear problem."""
        text = json.dumps(_completed(0)).replace(
            '"result": 0', '"result": ' + "[" * 1000 + "]" * 1000
        )
        assert _text_problems(text) == ["not JSON (recursion limit exceeded at line 1 column 335)"]

    def test_oversized_line(self) -> None:
        """A line over MAX_EVENT_BYTES is refused before it is parsed."""
        text = json.dumps(_completed("x" * MAX_EVENT_BYTES))
        assert _text_problems(text) == [
            f"not JSON (the event is {len(text):,} bytes of JSON; at most {MAX_EVENT_BYTES:,} "
            "are allowed)"
        ]


_json_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.integers(min_value=10**3990, max_value=10**4010)
)
_json = st.recursive(
    _json_leaves,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=20,
)


@given(_json, st.integers(min_value=0, max_value=MAX_DEPTH + 2))
def test_text_and_python_agree(value: Any, depth: int) -> None:
    """For any value (NaN, surrogates, huge integers, deep nesting), the Python path accepts
    exactly what the text path accepts, and an accepted event reads back the same."""
    wrapped: Any = value
    for _ in range(depth):
        wrapped = [wrapped]
    data = _completed(wrapped)
    try:
        from_python = parse_event(data)
    except EventFormatError:
        from_python = None
    try:
        text = json.dumps(data, ensure_ascii=False).encode("utf-8", "surrogatepass")
    except ValueError:  # an integer Python will not print: no text can carry it
        assert from_python is None
        return
    try:
        from_text = parse_event(text)
    except EventFormatError:
        from_text = None
    assert (from_python is None) == (from_text is None)
    if from_python is not None:
        assert parse_event(dump_event(from_python)) == from_python
