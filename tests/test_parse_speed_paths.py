"""The parse path's shortcuts decide exactly as the full checks they stand in for.

`check_parsed_value` looks, in a value jiter read, only for what jiter lets through, and
`parse_timestamp` recognises the usual shapes of a timestamp by a table lookup before its
regex: both must accept and refuse what the full checks do, in the same words.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

import jiter
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.events._bounds import MAX_DEPTH, MAX_INT_DIGITS, check_json_value, check_parsed_value
from agentfsm.events._canonical import canonical_json, canonical_text
from agentfsm.events.models import _RFC3339, _check_timestamp, parse_timestamp


def _verdict(check: object, value: object) -> object:
    try:
        return ("ok", check(value))  # type: ignore[operator]
    except ValueError as exc:
        return ("refused", str(exc))


def _json_text() -> st.SearchStrategy[str]:
    scalars = st.one_of(
        st.integers(-(10**20), 10**20).map(str),
        st.integers(MAX_INT_DIGITS - 2, MAX_INT_DIGITS + 2).map(lambda n: "-" * (n % 2) + "7" * n),
        st.sampled_from(["1e308", "1e309", "-1e400", "1E+400", "2.5e-400", "0.5", "3.0"]),
        st.text(max_size=4).map(lambda s: json.dumps(s, ensure_ascii=False)),
        st.sampled_from(["true", "false", "null"]),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
            st.lists(
                st.tuples(st.sampled_from("abc"), inner), max_size=3, unique_by=lambda kv: kv[0]
            ).map(lambda kv: "{" + ",".join(f'"{k}":{v}' for k, v in kv) + "}"),
            st.integers(MAX_DEPTH - 2, MAX_DEPTH + 2).map(lambda n: "[" * n + "1" + "]" * n),
            st.integers(MAX_DEPTH - 2, MAX_DEPTH + 2).map(lambda n: '{"k":' * n + "1" + "}" * n),
        ),
        max_leaves=6,
    )


@settings(max_examples=400, deadline=None)
@given(_json_text())
def test_a_parsed_value_is_judged_as_the_full_walk_judges_it(text: str) -> None:
    value = jiter.from_json(text.encode(), allow_inf_nan=False, catch_duplicate_keys=True)
    assert _verdict(check_parsed_value, value) == _verdict(check_json_value, value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"a":[1,{"b":1e400}]}', "the value at 'a[1].b' is inf"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nests deeper than"),
        ('{"n":' + "9" * (MAX_INT_DIGITS + 1) + "}", "the value at 'n' is an integer of more"),
        ("-1e400", "the value is -inf"),
    ],
)
def test_what_jiter_lets_through_is_refused_where_it_is(text: str, words: str) -> None:
    value = jiter.from_json(text.encode(), allow_inf_nan=False)
    with pytest.raises(ValueError, match=re.escape(words)):
        check_parsed_value(value)


def _full(value: str) -> object:
    """`parse_timestamp` as it was before its shortcut: the regex, then fromisoformat."""
    if not _RFC3339.match(value):
        return "refused"
    head, dot, tail = value.partition(".")
    if dot:
        digits = len(tail) - len(tail.lstrip("0123456789"))
        if digits > 6:
            value = head + "." + tail[:6] + tail[digits:]
    try:
        return datetime.fromisoformat(value.upper())
    except ValueError:
        return "refused"


def _fast(value: str) -> object:
    try:
        return parse_timestamp(value)
    except ValueError:
        return "refused"


_DIGIT = st.sampled_from("0123456789")
_FIELD = st.one_of(_DIGIT, st.sampled_from("٣9x "))  # an Arabic-Indic digit, a letter, a space


@settings(max_examples=600, deadline=None)
@given(
    st.lists(_FIELD, min_size=14, max_size=14),
    st.sampled_from("Tt "),
    st.integers(0, 9),
    st.sampled_from(["Z", "z", "+", "-", ""]),
    st.lists(_DIGIT, min_size=4, max_size=4),
)
def test_a_timestamp_is_judged_as_the_full_check_judges_it(
    digits: list[str], sep: str, fraction: int, zone: str, offset: list[str]
) -> None:
    d = "".join(digits)
    text = f"{d[:4]}-{d[4:6]}-{d[6:8]}{sep}{d[8:10]}:{d[10:12]}:{d[12:14]}"
    text += "." + "5" * fraction if fraction else ""
    text += (
        f"{zone}{offset[0]}{offset[1]}:{offset[2]}{offset[3]}" if zone in "+-" and zone else zone
    )
    assert _fast(text) == _full(text)
    assert _checked(text) == ("refused" if _full(text) == "refused" else text)


@pytest.mark.parametrize(
    "text",
    [
        "2026-09-01T10:02:11Z",
        "2026-09-01T10:02:11.123456+08:00",
        "2026-09-01t10:02:11.123456789z",
        "2026-13-01T10:02:11Z",
        "2026-02-30T10:02:11Z",
        "2026-09-01T24:00:00Z",
        "2026-09-01T10:02:11+24:00",
        "2026-09-01T10:02:11",
        "2026-09-01 10:02:11Z",
        "2026-09-01T10:02:11Z\ud800",  # a lone surrogate: no UTF-8 to look at
        "2026-09-01T10:02:1\u0663Z",  # an Arabic-Indic digit: bytes past ASCII
    ],
)
def test_timestamps_at_the_edges(text: str) -> None:
    assert _fast(text) == _full(text)
    assert _checked(text) == ("refused" if _full(text) == "refused" else text)


def _checked(value: str) -> object:
    """What an event's check makes of `value`: the same text, or refused."""
    try:
        return _check_timestamp(value)
    except ValueError:
        return "refused"


@pytest.mark.parametrize(
    "value", [{"a": 1.0, "b": [1e-7, 1e16, 0.00001]}, {"x": "1.0e+5", "n": 10**20}, {"k": 2.5}]
)
def test_canonical_text_is_still_canonical_json(value: object) -> None:
    line = json.dumps(value)
    assert canonical_text(line) == canonical_text(line.encode()) == canonical_json(json.loads(line))
