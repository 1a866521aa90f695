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
- one event's JSON line is at most `MAX_EVENT_BYTES` bytes, its end left out (checked where
  the line exists: reading a file, line by line as it is read (`agentfsm.events._lines`),
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
    "PARSED_TEXT",
    "check_json_value",
    "check_parsed_value",
    "check_size",
    "parsed_within",
    "unstorable",
    "utf8_size",
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
# Negated once here: `-_INT_BOUND` in a test builds a 4,000-digit integer on every integer.
_INT_FLOOR = -_INT_BOUND


def check_json_value(value: Any) -> Any:
    """Return `value` if it is within the limits; else raise `ValueError` saying where.

    Types other than JSON's are left for the model's own validation to report.
    """
    try:
        _walk(value, 0, False)
    except _Bad as bad:
        raise ValueError(bad.sentence()) from None
    return value


def check_parsed_value(value: Any) -> Any:
    """`check_json_value` for a value jiter read from text (as `parse_event` calls it), in a
    fraction of the time: only what jiter lets through is looked for.

    jiter refuses lone surrogates, NaN and Infinity, integers of more than 4,300 digits and
    nesting past about 200 levels, and its keys are strings. What gets through is a float
    past the largest double (`1e400` reads as infinity), an integer of more than
    `MAX_INT_DIGITS` digits, and nesting past `MAX_DEPTH`: found here with no size to sum,
    no string to look at and no call per scalar. On a find, `check_json_value` says where.
    """
    cls = value.__class__
    if cls is dict or cls is list:
        if parsed_within(value, 0):
            return value
    elif cls is float:
        if _isfinite(value):
            return value
    elif cls is not int or _INT_FLOOR < value < _INT_BOUND:
        return value
    return check_json_value(value)


_isfinite = math.isfinite


def parsed_within(container: Any, depth: int) -> bool:
    """Whether an object or array jiter read, at `depth`, is within the limits jiter does
    not enforce itself."""
    if depth == MAX_DEPTH:
        return False
    for item in container.values() if container.__class__ is dict else container:
        cls = item.__class__
        if cls is dict or cls is list:
            if not parsed_within(item, depth + 1):
                return False
        elif cls is float:
            if not _isfinite(item):
                return False
        elif cls is int and not _INT_FLOOR < item < _INT_BOUND:
            return False
    return True


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
        bound = _walk(value, 0, True)
    except _Bad as bad:
        return bad.sentence()
    # The walk's bound on the JSON size is loose (every character taken as a 6-byte escape):
    # only a value it cannot rule out is measured exactly, once.
    if bound > MAX_EVENT_BYTES - _ENVELOPE_ROOM:
        size = len(json.dumps(value, ensure_ascii=False).encode())
        if size > MAX_EVENT_BYTES - _ENVELOPE_ROOM:
            return (
                f"the value is {size:,} bytes of JSON; an event holds at most {MAX_EVENT_BYTES:,}"
            )
    return None


class _ParsedText:
    """The validation context of an event `parse_event` read from text with jiter."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PARSED_TEXT"


#: Passed as pydantic's validation context by `parse_event` for what jiter read from text:
#: the models' JSON values, of JSON types by construction, are checked by
#: `check_parsed_value` and not validated again by pydantic.
PARSED_TEXT: Any = _ParsedText()


def check_size(line: str | bytes) -> None:
    """Refuse a JSON line longer than `MAX_EVENT_BYTES` (its end, `\\n` or `\\r\\n`, left
    out), without copying it.

    Raises:
        ValueError: naming both sizes.
    """
    size = len(line)
    if size <= MAX_EVENT_BYTES // 4:  # within the limit however it is encoded: most lines
        return
    if isinstance(line, str):
        size = utf8_size(line)
    size -= _end(line)
    if size > MAX_EVENT_BYTES:
        raise ValueError(
            f"the event is {size:,} bytes of JSON; at most {MAX_EVENT_BYTES:,} are allowed"
        )


def _end(line: str | bytes) -> int:
    """The length of the line's end: `\\r\\n`, `\\n` or none."""
    if isinstance(line, str):
        return 2 if line.endswith("\r\n") else 1 if line.endswith("\n") else 0
    return 2 if line.endswith(b"\r\n") else 1 if line.endswith(b"\n") else 0


#: Characters encoded at a time to measure a long text: one copy of this size, not of the text.
_MEASURED = 1 << 16


def utf8_size(text: str) -> int:
    """The bytes of `text` in UTF-8 (a lone surrogate as the three bytes it would take),
    measured a slice at a time, so a long text is never copied whole."""
    if text.isascii():  # known to the string itself: no scan
        return len(text)
    return sum(
        len(text[start : start + _MEASURED].encode("utf-8", "surrogatepass"))
        for start in range(0, len(text), _MEASURED)
    )


class _Bad(Exception):  # noqa: N818  (a signal inside the walk, never raised out of here)
    """A value out of bounds; the walk adds each key on its way back up, so the success
    path builds no paths at all."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what
        self.path: list[str | int] = []

    def sentence(self) -> str:
        parts = reversed(self.path)
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{_escaped(p)}" for p in parts)
        where = where.lstrip(".")
        return f"the value at '{where}' {self.what}" if where else f"the value {self.what}"


_SCALAR_BOUND = 32  # an upper bound on a float's, a boolean's or null's JSON text


def _walk(value: Any, depth: int, strict: bool) -> int:
    """Check `value`; return an upper bound on the bytes of its JSON text."""
    cls = value.__class__
    if cls is str:
        if not value.isascii():
            _check_text(value)
        return 6 * len(value) + 2
    if cls is dict:
        if depth == MAX_DEPTH:
            raise _Bad(f"nests deeper than {MAX_DEPTH} levels of arrays and objects")
        size = 2
        for key, item in value.items():
            try:
                if key.__class__ is str:
                    if not key.isascii():
                        _check_text(key)
                    size += 6 * len(key) + 4
                elif strict:
                    raise _Bad(f"has a key {key!r} that is not a string")
                size += _walk(item, depth + 1, strict)
            except _Bad as bad:
                bad.path.append(key)
                raise
        return size
    if cls is list:
        if depth == MAX_DEPTH:
            raise _Bad(f"nests deeper than {MAX_DEPTH} levels of arrays and objects")
        size = 2
        for index, item in enumerate(value):
            try:
                size += _walk(item, depth + 1, strict) + 1
            except _Bad as bad:
                bad.path.append(index)
                raise
        return size
    if cls is float:
        if not math.isfinite(value):
            raise _Bad(f"is {value!r}, which JSON cannot hold (numbers must be finite)")
        return _SCALAR_BOUND
    if cls is int:
        if not _INT_FLOOR < value < _INT_BOUND:
            raise _Bad(f"is an integer of more than {MAX_INT_DIGITS:,} digits")
        bits: int = value.bit_length()
        return bits // 3 + 3
    if strict and not isinstance(value, _JSON_SCALARS):
        raise _Bad(f"is a {cls.__name__}, not a JSON value")
    return _SCALAR_BOUND


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end].encode("unicode_escape").decode("ascii")
        raise _Bad(
            f"is not valid Unicode (a lone surrogate '{bad}' at index {exc.start})"
        ) from None


def _escaped(key: str) -> str:
    return key if key.isprintable() and key.isascii() else key.encode("unicode_escape").decode()
