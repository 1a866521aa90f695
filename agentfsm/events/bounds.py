"""What a value must be to be stored and read back: one set of limits for every path.

An event is accepted only if every reader can read it back and hash it. Python builds
values JSON cannot hold (NaN, infinities, strings with lone surrogates, integers too long
to print), and a parser has a nesting limit (the one pydantic uses stops near 200 levels).
Each would pass a naive "is it JSON" check and then break a later reader, after the fact
was acknowledged. So the limits are checked where events are made and parsed, the same way
whether the event came as text or as Python objects:

- a JSON value (tool arguments, a tool result, a model output) nests at most `MAX_DEPTH`
  levels of arrays and objects;
- numbers are finite, and integers have at most `MAX_INT_DIGITS` digits;
- strings (and object keys) are valid Unicode: no lone surrogates;
- one event's JSON line is at most `MAX_EVENT_BYTES` bytes (checked where the line exists:
  parsing text, and a store's append).
"""

from __future__ import annotations

import json
import math
from typing import Any

__all__ = [
    "MAX_DEPTH",
    "MAX_EVENT_BYTES",
    "MAX_INT_DIGITS",
    "check_json_value",
    "check_size",
    "unstorable",
]

#: Levels of arrays and objects one JSON value of an event may nest. An event adds at most
#: four levels around its values, which keeps every event well inside the parser's limit.
MAX_DEPTH = 100
#: Digits an integer may have. Python prints at most 4,300 (`sys.get_int_max_str_digits`),
#: and the JSON parser reads as many; below both, so every integer accepted can be hashed.
MAX_INT_DIGITS = 4000
#: Bytes of one event's JSON line.
MAX_EVENT_BYTES = 8 * 1024 * 1024

_INT_BOUND = 10**MAX_INT_DIGITS


def check_json_value(value: Any) -> Any:
    """Return `value` if it is within the limits; else raise `ValueError` saying where.

    Types other than JSON's are left for the model's own validation to report.
    """
    _walk(value, 0, ())
    return value


#: Room left in an event's line for its envelope and other fields, when one value is sized.
_ENVELOPE_ROOM = 64 * 1024
_JSON_SCALARS = (str, int, float, bool, type(None))


def unstorable(value: Any) -> str | None:
    """Why an event could not carry `value` (a tool's result, a model's answer), or None.

    The limits above, plus: only JSON's types (dicts with string keys, lists, strings,
    numbers, booleans, null), and small enough to fit in one event's line. For producers
    that hold values from outside (a tool, a model, an SDK) and must record them as what
    they are instead of failing after the fact.
    """
    try:
        _walk(value, 0, (), strict=True)
    except ValueError as exc:
        return str(exc)
    # A string escapes to at most 6 bytes a character; only a long one needs measuring.
    if isinstance(value, list | dict) or (
        isinstance(value, str) and len(value) * 6 > MAX_EVENT_BYTES - _ENVELOPE_ROOM
    ):
        size = len(json.dumps(value, ensure_ascii=False).encode())
        if size > MAX_EVENT_BYTES - _ENVELOPE_ROOM:
            return (
                f"the value is {size:,} bytes of JSON; an event holds at most {MAX_EVENT_BYTES:,}"
            )
    return None


def check_size(line: str | bytes) -> None:
    """Refuse a JSON line longer than `MAX_EVENT_BYTES`.

    Raises:
        ValueError: naming both sizes.
    """
    size = len(line)
    if size > MAX_EVENT_BYTES // 4 and isinstance(line, str):
        size = len(line.encode("utf-8", "surrogatepass"))
    if size > MAX_EVENT_BYTES:
        raise ValueError(
            f"the event is {size:,} bytes of JSON; at most {MAX_EVENT_BYTES:,} are allowed"
        )


def _walk(value: Any, depth: int, path: tuple[str | int, ...], *, strict: bool = False) -> None:
    cls = value.__class__
    if cls is str:
        if not value.isascii():
            _check_text(value, path)
    elif cls is dict:
        if depth == MAX_DEPTH:
            _fail(path, f"nests deeper than {MAX_DEPTH} levels of arrays and objects")
        for key, item in value.items():
            if key.__class__ is str and not key.isascii():
                _check_text(key, (*path, key))
            elif strict and key.__class__ is not str:
                _fail(path, f"has a key {key!r} that is not a string")
            _walk(item, depth + 1, (*path, key), strict=strict)
    elif cls is list:
        if depth == MAX_DEPTH:
            _fail(path, f"nests deeper than {MAX_DEPTH} levels of arrays and objects")
        for index, item in enumerate(value):
            _walk(item, depth + 1, (*path, index), strict=strict)
    elif cls is float and not math.isfinite(value):
        _fail(path, f"is {value!r}, which JSON cannot hold (numbers must be finite)")
    elif cls is int and not -_INT_BOUND < value < _INT_BOUND:
        _fail(path, f"is an integer of more than {MAX_INT_DIGITS:,} digits")
    elif strict and not isinstance(value, _JSON_SCALARS):
        _fail(path, f"is a {cls.__name__}, not a JSON value")


def _check_text(text: str, path: tuple[str | int, ...]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end].encode("unicode_escape").decode("ascii")
        _fail(path, f"is not valid Unicode (a lone surrogate '{bad}' at index {exc.start})")


def _fail(path: tuple[str | int, ...], what: str) -> None:
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{_escaped(p)}" for p in path)
    raise ValueError(f"the value at '{where.lstrip('.')}' {what}" if where else f"the value {what}")


def _escaped(key: str) -> str:
    return key if key.isprintable() and key.isascii() else key.encode("unicode_escape").decode()
