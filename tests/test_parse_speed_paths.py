"""The parse path's shortcuts decide exactly as the full checks they stand in for.

`check_parsed_value` looks, in a value jiter read, only for what jiter lets through;
`parse_timestamp` recognises the usual shapes of a timestamp by a table lookup before its
regex; an event's timestamp is checked by one regular expression in Rust
(`TIMESTAMP_PATTERN`) instead of by parsing it: each must accept and refuse what the full
checks do, in the same words.
"""

from __future__ import annotations

import json
import re
from datetime import datetime

import jiter
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.errors import EventFormatError
from agentfsm.events import parse_event
from agentfsm.events._bounds import MAX_DEPTH, MAX_INT_DIGITS, check_json_value, check_parsed_value
from agentfsm.events._canonical import canonical_json, canonical_text
from agentfsm.events.models import _RFC3339, TIMESTAMP_PATTERN, is_timestamp, parse_timestamp


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
    """What an event's check makes of `value` (the pattern in Rust, and in Python's `re`):
    the same text, or refused; and the words of a refusal, `parse_timestamp`'s."""
    verdict = is_timestamp(value)
    assert verdict == (TIMESTAMP_PATTERN.fullmatch(value) is not None)
    line = {"type": "run.resumed", "run_id": "r", "sequence": 1, "occurred_at": value}
    if verdict:
        assert parse_event(line).occurred_at == value
        return value
    with pytest.raises(EventFormatError) as refused:
        parse_event(line)
    with pytest.raises(ValueError, match=r".") as why:
        parse_timestamp(value)
    assert refused.value.problems == (f"field 'occurred_at': {why.value}",)
    return "refused"


def _judged_alike(texts: list[str]) -> list[str]:
    """The texts the pattern and the full check judge differently (none, if they agree)."""
    return [t for t in texts if (_full(t) == "refused") == is_timestamp(t)]


def test_every_date_is_judged_as_the_full_check_judges_it() -> None:
    """Every day of 400 years (the Gregorian cycle), the days around each century and
    February 29th of every year 0 to 9999, each month and day 00 to 99."""
    years = [*range(401), 1600, 1700, 1800, 1900, 2000, 2100, 2400, 9996, 9999]
    texts = [
        f"{y:04d}-{m:02d}-{d:02d}T10:02:11Z" for y in years for m in range(14) for d in range(33)
    ]
    texts += [f"2026-{a:02d}-01T10:02:11Z" for a in range(100)]
    texts += [f"2026-01-{a:02d}T10:02:11Z" for a in range(100)]
    texts += [f"{y:04d}-02-29T00:00:00Z" for y in range(10000)]
    assert _judged_alike(texts) == []


def test_every_time_and_offset_is_judged_as_the_full_check_judges_it() -> None:
    """Each of hour, minute and second 00 to 99; every offset -99:99 to +99:99; one to
    twelve digits of a second; each spelling of the separator and of `Z`."""
    texts = [
        text
        for a in range(100)
        for text in (
            f"2026-09-01T{a:02d}:02:11Z",
            f"2026-09-01T10:{a:02d}:11Z",
            f"2026-09-01T10:02:{a:02d}Z",
        )
    ]
    texts += [
        f"2026-09-01T10:02:11{sign}{h:02d}:{m:02d}"
        for sign in "+-"
        for h in range(100)
        for m in range(100)
    ]
    texts += [
        f"2026-09-01{sep}10:02:11{fraction}{zone}"
        for sep in "Tt x"
        for fraction in ["", ".", *("." + "7" * n for n in range(1, 13))]
        for zone in ("Z", "z", "+01:00", "", " Z", "Z ", "+0100", "+01")
    ]
    assert _judged_alike(texts) == []


@pytest.mark.parametrize(
    "value", [{"a": 1.0, "b": [1e-7, 1e16, 0.00001]}, {"x": "1.0e+5", "n": 10**20}, {"k": 2.5}]
)
def test_canonical_text_is_still_canonical_json(value: object) -> None:
    line = json.dumps(value)
    assert canonical_text(line) == canonical_text(line.encode()) == canonical_json(json.loads(line))
