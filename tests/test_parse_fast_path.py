"""Text is judged exactly as the dict jiter reads from it, on a shorter path.

`parse_event` reads text strictly (jiter) and tells the models so: the JSON values, of JSON
types by construction, are walked for the limits but not validated by pydantic again; every
refusal is made again the way a dict's is. These tests hold it to that: the same events, the
same refusals in the same words, whatever the JSON values hold.
"""

from __future__ import annotations

import json

import jiter
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.errors import EventFormatError
from agentfsm.events import codec, dump_event, parse_event
from agentfsm.events._bounds import MAX_DEPTH, MAX_INT_DIGITS
from benchmarks.corpus import build_corpus

HEAD = '{"run_id":"r-1","sequence":3,"type":"tool.completed","occurred_at":"2026-09-01T10:02:11Z","action_id":"a1","result":'


def _strict(text: str) -> object:
    """What the strict path makes of `text`: the event, or the refusal's words."""
    try:
        raw = jiter.from_json(text.encode(), allow_inf_nan=False, catch_duplicate_keys=True)
    except ValueError:
        return "not JSON"
    try:
        return parse_event(raw)
    except EventFormatError as exc:
        return str(exc)


def _parsed(text: str) -> object:
    try:
        return parse_event(text)
    except EventFormatError as exc:
        return "not JSON" if "not JSON" in str(exc) else str(exc)


def test_what_stores_hold_is_parsed_as_a_dict_is() -> None:
    lines = [dump_event(e) for run in build_corpus(400) for e in run]
    for line in lines:
        parsed, strict = parse_event(line), _strict(line)
        assert parsed == strict
        assert parsed.model_fields_set == strict.model_fields_set  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("1e400", "is inf, which JSON cannot hold"),
        ("-1e400", "is -inf, which JSON cannot hold"),
        ("9" * (MAX_INT_DIGITS + 1), f"is an integer of more than {MAX_INT_DIGITS:,} digits"),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nests deeper than"),
        ('{"k":1,"k":2}', "the key 'k' is repeated"),
    ],
)
def test_what_jiter_lets_through_is_refused_in_the_walks_words(value: str, words: str) -> None:
    """A float that overflows, an integer jiter reads but no store prints, a value nested past
    the limit, a repeated key: refused on text in our layout as on any other."""
    with pytest.raises(EventFormatError) as info:
        parse_event(HEAD + value + "}")
    assert words in str(info.value)


def _json_text(depth: int = 0) -> st.SearchStrategy[str]:
    scalars = st.one_of(
        st.integers(-(10**20), 10**20).map(str),
        st.integers(MAX_INT_DIGITS - 2, MAX_INT_DIGITS + 2).map(lambda n: "1" * n),
        st.sampled_from(["1e308", "1e309", "-2.5e-400", "1.5", "0.1", "1E400", "-0", "3.0"]),
        st.text(max_size=5).map(lambda s: json.dumps(s, ensure_ascii=False)),
        st.sampled_from(['"\\u00e9"', '"\\ud800"', "true", "null", "NaN"]),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
            st.lists(st.tuples(st.sampled_from("abk"), inner), max_size=3).map(
                lambda kv: "{" + ",".join(f'"{k}":{v}' for k, v in kv) + "}"
            ),
            st.integers(MAX_DEPTH - 3, MAX_DEPTH + 3).map(lambda n: "[" * n + "1" + "]" * n),
        ),
        max_leaves=6,
    )


@settings(max_examples=300, deadline=None)
@given(_json_text())
def test_a_tool_result_parses_as_the_strict_path_would(value: str) -> None:
    text = HEAD + value + "}"
    assert _parsed(text) == _strict(text)


ARGUMENTS = (
    '{"run_id":"r-1","sequence":2,"type":"tool.requested","occurred_at":"2026-09-01T10:02:11Z",'
    '"action_id":"a1","tool":"t","arguments":'
)


@settings(max_examples=300, deadline=None)
@given(_json_text(), st.sampled_from(["a", "b"]))
def test_tool_arguments_parse_as_the_strict_path_would(value: str, key: str) -> None:
    """Arguments are an object checked on its own path (`Arguments`): the same verdicts."""
    for arguments in ("{" + f'"{key}":' + value + "}", value):
        text = ARGUMENTS + arguments + "}"
        assert _parsed(text) == _strict(text)


@pytest.mark.parametrize("value", ['"\ud800"', '"\\ud800"', "NaN", "Infinity", '"x":1,"x"'])
def test_what_jiter_refuses_is_refused_on_our_layout_too(value: str) -> None:
    """A lone surrogate (as a character or an escape), NaN, Infinity: written in our
    layout, still not JSON."""
    with pytest.raises(EventFormatError) as info:
        parse_event(HEAD + value + "}")
    assert "not JSON" in str(info.value)


def test_arguments_must_still_be_an_object() -> None:
    """Skipping pydantic's pass over a JSON value keeps the field's own type: arguments
    are an object, text or not."""
    line = (
        '{"run_id":"r","sequence":2,"type":"tool.requested","occurred_at":'
        '"2026-09-01T10:02:11Z","action_id":"a","tool":"t","arguments":[1]}'
    )
    with pytest.raises(EventFormatError) as info:
        parse_event(line)
    assert "field 'arguments'" in str(info.value)


def test_text_values_are_the_parsers_own_fresh_objects() -> None:
    a, b = (parse_event(HEAD + '{"k":[1,2]}}') for _ in range(2))
    assert a.result == b.result  # type: ignore[attr-defined]
    assert a.result is not b.result  # type: ignore[attr-defined]


# A text orjson writes back byte for byte is not searched for repeated keys (it can hold
# none); every other text is. The property below holds that shortcut to the search itself.


def _searching(line: str | bytes) -> object:
    """What `parse_event` makes of `line` when every text is searched for repeated keys."""
    kept = codec._dumps
    codec._dumps = lambda raw: None  # nothing is ever written back: every text is searched
    try:
        return _verdict(line)
    finally:
        codec._dumps = kept


def _verdict(line: str | bytes) -> object:
    try:
        event = parse_event(line)
    except EventFormatError as exc:
        return str(exc)
    return (event, event.model_fields_set)  # type: ignore[union-attr]


_LINES = [dump_event(e) for run in build_corpus(60) for e in run]


@st.composite
def _edited_lines(draw: st.DrawFn) -> str:
    """A stored line, maybe with a key repeated (at the top, in a nested object or a JSON
    value), maybe spaced as Python's json writes, maybe with an integer past 64 bits, maybe
    with its line end or a space after it."""
    value = json.loads(draw(st.sampled_from(_LINES)))
    objects = [value, *(v for v in value.values() if isinstance(v, dict))]
    objects += [c for v in value.values() if isinstance(v, list) for c in v if isinstance(c, dict)]
    objects += [a for c in objects[1:] for a in c.values() if isinstance(a, dict)]
    target = draw(st.sampled_from(objects))
    if draw(st.booleans()) and target:
        key = draw(st.sampled_from(sorted(target)))
        repeat = draw(st.sampled_from([json.dumps(target[key]), '"other"', str(2**70), "1"]))
    else:
        key, repeat = "", ""
    if draw(st.booleans()):
        target["big"] = 2**64 + draw(st.integers(0, 3))
    spaced = draw(st.booleans())
    text = json.dumps(value, separators=(", ", ": ") if spaced else (",", ":"), ensure_ascii=False)
    if key:
        # The repeat goes right after the key's first appearance in `target`'s own text.
        own = json.dumps(target, separators=(", ", ": ") if spaced else (",", ":"))
        first = json.dumps({key: target[key]}, separators=(", ", ": ") if spaced else (",", ":"))
        edited = own.replace(first[1:-1], f"{first[1:-1]},{json.dumps(key)}:{repeat}", 1)
        text = text.replace(own, edited, 1)
    return text + draw(st.sampled_from(["", "\n", "\r\n", " "]))


@settings(max_examples=400, deadline=None)
@given(_edited_lines(), st.booleans())
def test_a_line_not_searched_for_repeated_keys_is_judged_as_if_searched(
    line: str, as_bytes: bool
) -> None:
    """Stored lines, and the same with a repeated key anywhere, spaced otherwise, holding an
    integer orjson cannot write: the same event, or the same refusal in the same words."""
    data = line.encode() if as_bytes else line
    assert _verdict(data) == _searching(data)


@pytest.mark.parametrize(
    "line",
    [
        HEAD + '{"k":1,"k":1}}',  # the same value twice: the text writes back a key short
        HEAD + '{"k":1},"result":{"k":1}}',  # a model's field twice
        HEAD.replace('"sequence":3', '"sequence":3,"sequence":3') + "1}",
    ],
)
def test_a_repeated_key_is_found_whatever_the_value(line: str) -> None:
    with pytest.raises(EventFormatError) as info:
        parse_event(line)
    assert "is repeated at line 1 column" in str(info.value)


def test_a_stored_line_is_read_once() -> None:
    """What `dump_event` writes is read by jiter once, not searched for repeated keys."""
    calls: list[bool] = []
    kept = codec._from_json

    def counted(data: bytes, **options: bool) -> object:
        calls.append(options.get("catch_duplicate_keys", False))
        return kept(data, **options)

    codec._from_json = counted
    try:
        for line in _LINES:
            parse_event(line.encode())
            parse_event(line)
            parse_event(line + "\r\n")  # as a file's lines are, their end still on
    finally:
        codec._from_json = kept
    assert calls == [False] * 3 * len(_LINES)
