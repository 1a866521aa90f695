"""`same_json` agrees with comparing canonical JSON texts, on any pair of JSON values."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.events.canonical import canonical_json, same_json

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
