"""Reading and writing events: JSON text or dicts in, validated models out, and back.

Errors name the input line, the run and sequence when they can be read, and every field
problem in a sentence, so a person can fix a producer from the message alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import jiter
import orjson
from pydantic import ValidationError

from agentfsm.errors import QUOTED, EventFormatError, quoted
from agentfsm.events._bounds import MAX_EVENT_BYTES, PARSED_TEXT, check_size
from agentfsm.events._lines import is_blank, lines_of
from agentfsm.events.models import Event, timestamp_problem
from agentfsm.events.vocabulary import BUILTIN_EVENTS, EventTypes

__all__ = [
    "dump_event",
    "event_json_schema",
    "event_to_dict",
    "make_event",
    "parse_event",
    "read_events",
]


def parse_event(
    data: str | bytes | Mapping[str, Any],
    *,
    line: int | None = None,
    events: EventTypes = BUILTIN_EVENTS,
) -> Event:
    """Validate one event from a JSON line (text or bytes) or a dict.

    Text is read strictly: a repeated key, `NaN`/`Infinity`, a lone surrogate escape or an
    integer too long to print is not JSON here, and a line over `MAX_EVENT_BYTES` is
    refused before it is parsed. Either way the value limits of `agentfsm.events._bounds`
    apply, so what parses is what every store and reader takes back.

    Args:
        data: the event as text, bytes or a dict.
        line: the input line, named in errors.
        events: the event types to accept: the built-in ones, or a table's `events` with
            its own types too.

    Raises:
        EventFormatError: naming the line, run and sequence where known, and each problem.
    """
    # Bytes are what stores and files give: told apart without an isinstance call.
    if data.__class__ is not bytes and not isinstance(data, _TEXT):
        return _validated(data, line, events)
    text = data
    try:
        if len(text) > _SURELY_WITHIN:  # the test `check_size` opens with, without its call
            check_size(text)  # before anything copies it
        if text.__class__ is not bytes and isinstance(text, str):
            text = text.encode("utf-8", "surrogatepass")  # a lone surrogate: jiter refuses it
        # jiter is pydantic's own parser, with the checks json.loads lacks (a repeated
        # key there silently keeps the last value, in `sequence` as in tool arguments).
        raw = _from_json(text, allow_inf_nan=False)
        try:
            written: bytes | None = _dumps(raw)
        except orjson.JSONEncodeError:  # an integer past 64 bits, nesting past its limit
            written = None
        if written != text and (written is None or written != text.rstrip(b"\r\n")):
            # A text that is exactly what orjson writes for the values read (its line end
            # aside, whitespace outside the value) has no repeated key: orjson writes each
            # key of a dict once, and a repeat in the text would have left it a key fewer
            # to write. That is what every store and `dump_event` write. Any other text is
            # read again, searching: the search costs jiter a heap copy of every key, more
            # than the writing back.
            raw = _from_json(text, allow_inf_nan=False, catch_duplicate_keys=True)
    except ValueError as exc:
        raise EventFormatError([f"not JSON ({_jiter_message(exc, data)})"], line=line) from None
    try:
        # Values jiter read are JSON by construction: not validated again (pydantic's pass
        # over a JSON value was a quarter of parsing an event), only checked for the
        # limits jiter does not enforce itself (`bounds.check_parsed_value`).
        event: Event = events.validate(raw, context=PARSED_TEXT)
    except ValidationError:
        pass  # refused: named below, in the words a dict's refusal gets
    else:
        return event
    return _validated(raw, line, events)


#: A tuple, not `str | bytes`: that union is built anew on every call that spells it.
_TEXT = (str, bytes)
_from_json = jiter.from_json
_dumps = orjson.dumps
#: Lines no longer than this are within `MAX_EVENT_BYTES` however they are encoded.
_SURELY_WITHIN = MAX_EVENT_BYTES // 4


def _validated(raw: Any, line: int | None, events: EventTypes) -> Event:
    try:
        event: Event = events.validate(raw)
    except ValidationError as exc:
        raise _format_error(raw, exc, line, events) from None
    return event


def make_event(type: str, /, **fields: Any) -> Event:
    """Build and validate one event from keyword fields: `make_event("handoff", ...)`."""
    return parse_event({"type": type, **fields})


def dump_event(event: Event) -> str:
    """One compact JSON line with exactly the fields the event was given, so it round-trips."""
    # The model's own serializer, called directly: `model_dump_json` is a Python wrapper
    # around it that costs a quarter of the call (every store append dumps every event).
    return event.__pydantic_serializer__.to_json(_tagged(event), exclude_unset=True).decode()


def event_to_dict(event: Event) -> dict[str, Any]:
    """The event as a JSON-able dict, as `dump_event` would write it."""
    return _tagged(event).model_dump(mode="json", exclude_unset=True)


def _tagged(event: Event) -> Event:
    # Only the fields an event was given are written, and the tag must always be: a parsed
    # event has it, one built in Python (`ToolStarted(...)`) may have left it to the class.
    # Marked here rather than in `model_post_init`, which would cost every parse a call.
    fields = event.model_fields_set
    if "type" not in fields:
        fields.add("type")
    return event


def read_events(
    lines: Iterable[str | bytes], *, events: EventTypes = BUILTIN_EVENTS
) -> Iterator[tuple[int, Event]]:
    """Parse JSON Lines lazily, yielding `(line_number, event)`; blank lines are skipped.

    Args:
        lines: the lines (text or bytes), or an open file or stream (binary or text), which
            is read one bounded line at a time (`agentfsm.events._lines.iter_lines`): no
            line longer than `MAX_EVENT_BYTES` is ever held whole.
        events: the event types to accept.

    Raises:
        EventFormatError: at the first line that is not a valid event (or, from a file, is
            too long or not UTF-8), naming that line.
    """
    for number, raw in enumerate(lines_of(lines), start=1):
        # The blank test copies nothing, and the parse measures before it copies: a long
        # line in memory is refused at the cost of its length.
        if is_blank(raw):
            continue
        yield number, parse_event(raw, line=number, events=events)


def event_json_schema(events: EventTypes = BUILTIN_EVENTS) -> dict[str, Any]:
    """The JSON Schema of the event union, for producers in other languages.

    For a table of your own, pass its `events`: its types are in the schema like the
    built-in ones.

    As strict as `parse_event` where JSON Schema can say it (closed objects, timestamps with
    an offset, lengths and bounds), and written so a standard 2020-12 validator reports the
    real field error: the union is chosen by `type` with `if`/`then` (pydantic's
    `discriminator` keyword is OpenAPI's, and a plain validator ignores it and says only "not
    valid under any of the given schemas").
    """
    generated = events.adapter.json_schema()
    mapping: dict[str, str] = generated["discriminator"]["mapping"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "agentfsm event",
        "type": "object",
        "required": ["type"],
        "properties": {"type": {"enum": sorted(mapping)}},
        "allOf": [
            {
                "if": {"properties": {"type": {"const": name}}, "required": ["type"]},
                "then": {"$ref": ref},
            }
            for name, ref in sorted(mapping.items())
        ],
        "$defs": generated["$defs"],
    }


_AT = re.compile(r" at line (\d+) column (\d+)\Z")
_NOT_NUMBERS = ("NaN", "Infinity")


def _jiter_message(exc: ValueError, data: str | bytes) -> str:
    text = str(exc)
    # jiter quotes a repeated key in double quotes; the rest of our messages use single.
    if text.startswith('Detected duplicate key "'):
        key, _, where = text.removeprefix('Detected duplicate key "').partition('" at ')
        return f"the key '{key}' is repeated at {where}"
    # Python's json module writes NaN and Infinity; say so rather than "expected value".
    found = _AT.search(text)
    if found is not None and found.group(1) == "1":
        at = int(found.group(2)) - 1
        rest = data[at : at + 9] if isinstance(data, str) else data[at : at + 9].decode("latin-1")
        token = next((t for t in _NOT_NUMBERS if rest.startswith(t)), None)
        if token is not None:
            return f"{token}{found.group(0)}: JSON has no NaN or Infinity"
    return text


def _format_error(
    raw: Any, exc: ValidationError, line: int | None, events: EventTypes
) -> EventFormatError:
    if not isinstance(raw, Mapping):
        return EventFormatError([f"expected a JSON object, got {type(raw).__name__}"], line=line)
    run_id = raw.get("run_id") if isinstance(raw.get("run_id"), str) else None
    seq = raw.get("sequence")
    sequence = seq if isinstance(seq, int) and not isinstance(seq, bool) else None
    problems = _problems(raw, exc, events)
    return EventFormatError(problems, line=line, run_id=run_id, sequence=sequence)


#: Problems of one line named in its refusal; the rest are counted. A line of 8 MiB can hold
#: half a million unknown keys: their sentences were 23 MB of message.
PROBLEMS = 20


def _problems(raw: Mapping[str, Any], exc: ValidationError, events: EventTypes) -> list[str]:
    known = ", ".join(f"'{t}'" for t in events.names)
    errors = exc.errors(include_url=False)
    if len(errors) > PROBLEMS:
        more = f"and {len(errors) - PROBLEMS:,} more problems"
        return [*_problems_of(raw, errors[:PROBLEMS], known), more]
    return _problems_of(raw, errors, known)


def _problems_of(raw: Mapping[str, Any], errors: list[Any], known: str) -> list[str]:
    problems: list[str] = []
    for err in errors:
        kind = err["type"]
        if kind == "union_tag_not_found":
            problems.append(f"field 'type' is missing; expected one of {known}")
            continue
        if kind == "union_tag_invalid":
            problems.append(
                f"unknown event type {quoted(raw.get('type'))}; expected one of {known}"
            )
            continue
        loc = list(err["loc"])
        if loc and loc[0] == raw.get("type"):
            loc = loc[1:]  # pydantic puts the union tag first; the reader knows the type
        where = ".".join(str(p) for p in loc)
        if len(where) > QUOTED:  # a key of a megabyte is named by its start
            where = f"{where[: QUOTED - 1]}…"
        if not where:  # a check across fields (a model validator) has no location
            problems.append(_strip_prefix(err["msg"]))
        elif kind == "extra_forbidden":
            problems.append(f"field '{where}' is not part of '{raw.get('type')}'")
        elif kind == "missing":
            problems.append(f"field '{where}' is required")
        elif kind == "timestamp":
            problems.append(f"field '{where}': {timestamp_problem(err['input'])}")
        else:
            got = f" (got {quoted(err['input'])})" if kind != "value_error" else ""
            problems.append(f"field '{where}': {_strip_prefix(err['msg'])}{got}")
    return problems


def _strip_prefix(msg: str) -> str:
    return msg.removeprefix("Value error, ")
