"""`same_json` agrees with comparing canonical JSON texts, on any pair of JSON values."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.events._canonical import canonical_json, canonical_text, same_json

# Scalars chosen to collide under Python's `==` (True == 1 == 1.0) but not as JSON.
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from([0, 1, 2, -1, 0.0, 1.0, 2.0, 1.5, "1", "", "a"]),
    st.integers(-5, 5),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=3),
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=400, deadline=None)
@given(json_values, json_values)
def test_same_json_is_equality_of_canonical_texts(a: Any, b: Any) -> None:
    """For any two values: same_json(a, b) exactly when their canonical JSON is equal."""
    assert same_json(a, b) == (canonical_json(a) == canonical_json(b))


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_a_value_is_the_same_json_as_itself_and_its_float_twin(a: Any) -> None:
    """Reflexive; and an integral float is the same JSON as its int (both print as `1`)."""
    assert same_json(a, a)
    assert same_json({"n": 1, "v": a}, {"n": 1.0, "v": a})


def test_a_boolean_is_not_the_number_python_says_it_equals() -> None:
    """`True == 1` in Python, but `true` is not `1` in JSON: a changed call stays changed."""
    assert not same_json({"force": True}, {"force": 1})
    assert not same_json([False], [0.0])


# Numbers where a C encoder and Python's spell the same value differently (exponents, tiny
# floats written out, integral floats, integers past 64 bits), strings that look like them,
# and every character JSON escapes: what `canonical_text` must still agree with Python on.
_tricky_floats = st.sampled_from(
    [1e-7, 1.5e-7, 9e-5, 1e-5, 0.0001, 0.00012, 1e15, 1.5e15, 1e16, 1e21, 5e-324, -0.0, 0.1]
) | st.sampled_from([1.0, 20.0, -3.0, 100.5, 0.05])
_tricky_scalars = st.one_of(
    scalars,
    _tricky_floats,
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(),
    st.integers(min_value=2**63 - 2, max_value=2**64 + 2),
    st.integers(min_value=-(2**63) - 2, max_value=-(2**63) + 2),
    st.sampled_from(["1e5", ":1.0,", "0.00001", '\x00\x1f\x7f\u2028\b\f\n\r\t"\\/', "é😀"]),
    st.text(),
)
_wide_values = st.recursive(
    _tricky_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=12,
)


@settings(max_examples=600, deadline=None)
@given(_wide_values)
def test_canonical_text_of_a_line_is_canonical_json_of_its_value(value: Any) -> None:
    """For any JSON value and any spelling of it (ours, Python's, indented), the fast
    canonical text of the line equals `canonical_json` of the value, byte for byte."""
    for line in (json.dumps(value), json.dumps(value, ensure_ascii=False, indent=1)):
        assert canonical_text(line) == canonical_json(value)


def test_canonical_text_refuses_what_canonical_json_refuses() -> None:
    """A line holding a number JSON cannot hold is refused, not written as `null`."""
    for line in ('{"x":NaN}', '{"x":-Infinity}', "[1e400]"):
        with pytest.raises(ValueError, match="not JSON compliant"):
            canonical_text(line)


def _integers_for_integral_floats(value: Any) -> Any:
    """What canonical JSON means by "1 and 1.0 agree", spelt out the slow, obvious way."""
    if type(value) is float and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integers_for_integral_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integers_for_integral_floats(v) for v in value]
    return value


@settings(max_examples=600, deadline=None)
@given(_wide_values)
def test_canonical_json_is_sorted_compact_python_json_with_integral_floats_as_integers(
    value: Any,
) -> None:
    """The fast path (Python's text kept unless it may spell an integral float) writes what
    the definition does, for tricky numbers and for strings that look like them."""
    expected = json.dumps(
        _integers_for_integral_floats(value),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
    )
    assert canonical_json(value) == expected
    assert canonical_json([value, 1.0, {"x": 1e16}]) == f'[{expected},1,{{"x":{10**16}}}]'
