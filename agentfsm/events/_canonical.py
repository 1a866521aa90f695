"""Canonical JSON and digests: one spelling for one value.

Key order, whitespace and the spelling of numbers (`1`, `1.0`, `1e0`) do not change the
canonical form; a different value, or a bool where a number was, does. Approval binding,
loop fingerprints and the stores' hash chain all rest on this.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, AnyStr

import orjson

__all__ = ["call_digest", "canonical_json", "canonical_text", "digest", "same_json"]

_encode = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


def _normalise(value: Any) -> Any:
    # Integral floats are written as integers so 1.0 and 1 agree; bools are left alone
    # (bool is an int subclass, but True is not the number 1 on the wire).
    if value.__class__ is float:
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """The canonical JSON text of a JSON-able value."""
    text = _encode(value)
    # Python's spelling is canonical but for integral floats ("1.0", "1e+16"), which
    # canonical JSON writes as integers: only a text that may hold one pays the walk.
    if _after_digit(text, ".0", integral=True) or _after_digit(text, "e+"):
        return _encode(_normalise(value))
    return text


# A digit as `str` indexing gives it and as `bytes` indexing does: one test serves both.
_DIGITS = frozenset("0123456789") | frozenset(b"0123456789")


def _after_digit(text: AnyStr, needle: AnyStr, *, integral: bool = False) -> bool:
    """Whether `needle` (two characters) occurs in `text` right after a digit (and, if
    `integral`, not right before one): how a number spelt some way shows in JSON text. A
    string that merely looks like one answers True too, which only costs the slow path.

    Searched with `find`, which skips ahead in C: a regex tried at every position cost
    2.6 µs on a 250-byte event holding any decimal (a model call's cost).
    """
    digits = _DIGITS
    last = len(text) - 2
    at = text.find(needle)
    while at != -1:
        if (
            at > 0
            and text[at - 1] in digits
            and (not integral or at == last or text[at + 2] not in digits)
        ):
            return True
        at = text.find(needle, at + 2)
    return False


_SORTED = orjson.OPT_SORT_KEYS


def _may_differ(text: bytes) -> bool:
    """Whether orjson may have spelt a number of `text` otherwise than Python, whose
    spelling canonical JSON is: an exponent ("1e-7" for "1e-07"; orjson's always carry a
    sign), a small float written out ("0.00001" for "1e-05"), an integral float ("1.0",
    which canonical JSON writes as "1"; orjson reads an integer past 64 bits as a float,
    which it writes with an exponent).
    """
    # `find`, not `in`: a bytes `in` first tries its operand as an integer, and the error
    # that raises and clears cost more than the search (an eighth of a usual event here).
    if text.find(b".0") < 0 and text.find(b"e-") < 0 and text.find(b"e+") < 0:
        return False  # most events: three passes in C, no call
    return (
        _after_digit(text, b".0", integral=True)
        or _after_digit(text, b"e-")
        or _after_digit(text, b"e+")
        or text.find(b".0000") >= 0
    )


def canonical_text(line: str | bytes) -> str:
    """`canonical_json(json.loads(line))`, byte for byte, in C unless a number needs Python.

    What the stores' hash chain covers, computed from the stored line: a third of the cost
    of dumping the event to a dict and encoding that in Python.

    Raises:
        ValueError: the line is not JSON, or holds a number JSON cannot (NaN, Infinity).
    """
    try:
        text = orjson.dumps(orjson.loads(line), option=_SORTED)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        pass  # NaN, a lone surrogate, nesting past orjson's limit: Python decides
    else:
        if not _may_differ(text):
            return text.decode()
    return canonical_json(json.loads(line))


def digest(value: Any) -> str:
    """`sha256:` and the hex digest of the canonical JSON of `value`."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode()).hexdigest()


def call_digest(tool: str, arguments: Any) -> str:
    """The digest an approval is bound to: the tool's name and the canonical arguments."""
    return digest({"tool": tool, "arguments": arguments})


_NUMBERS = (int, float)


def same_json(a: Any, b: Any) -> bool:
    """Whether two JSON values have the same canonical form, without serialising either.

    Python's `==` is almost that, except that it takes `True` for `1`; this walk checks
    types as it goes and costs a fraction of two `canonical_json` calls on the hot path.
    """
    ca, cb = a.__class__, b.__class__
    if ca is not cb:
        return ca in _NUMBERS and cb in _NUMBERS and a == b
    if ca is dict:
        if a.keys() != b.keys():
            return False
        # Scalars of one class compare in place: tool arguments are mostly flat, and a
        # call per value cost a third of checking a requested call against its proposal.
        for k, v in a.items():
            w = b[k]
            cv = v.__class__
            if cv is w.__class__ and cv is not dict and cv is not list:
                if v != w:
                    return False
            elif not same_json(v, w):
                return False
        return True
    if ca is list:
        return len(a) == len(b) and all(map(same_json, a, b))
    return bool(a == b)
