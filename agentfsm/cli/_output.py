"""What the command line prints: text from a log escaped, JSON strict.

Everything a log or a store holds is untrusted: a run id, a tool name or a reason may carry
a newline that fakes an output line, or a terminal escape that recolours or hides text.
`shown` is the one door such text goes through on its way to a person: whatever
`str.isprintable` rejects (controls, escapes, bidirectional overrides, lone surrogates,
line and paragraph separators) comes out as a Python-style escape (`\\n`, `\\x1b`,
`\\u202e`). A backslash already in the text is left alone: log lines are JSON, full of
escapes a person reads as they are, and it makes `shown` idempotent, so a message built
from shown parts can go through it again on its way out. `--format json` goes through
`print_json`: RFC 8259 JSON (no NaN or Infinity), the same characters as `\\uXXXX`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentfsm.cli._common import PROG, UsageError
from agentfsm.errors import InvalidTableError

__all__ = ["error_text", "print_json", "shown", "shown_json", "why"]

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    if char.isprintable():
        return char
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def shown(text: str) -> str:
    """`text` safe to print on a terminal: one line, no control or escape characters.

    `shown("r1\\n\\x1b[31m")` prints on one line as `r1\\n\\x1b[31m`, in no colour.
    """
    if text.isprintable():  # nearly always: checked at C speed
        return text
    return "".join(map(_escape, text))


def _json_escape(char: str) -> str:
    if char.isprintable() or char == "\n":  # json.dumps escapes newlines in strings itself
        return char
    code = ord(char)
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON spells a code point past the BMP as a UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _json_safe(text: str) -> str:
    # json.dumps (ensure_ascii off) escapes C0 controls, quotes and backslashes; what it
    # leaves raw and a terminal may act on can only sit inside a string, so a \u escape
    # there is the same JSON value.
    if text.isprintable():
        return text
    return "".join(map(_json_escape, text))


def _dumps(value: Any, indent: int | None = None) -> str:
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, sort_keys=True, indent=indent)
    return _json_safe(text)


def shown_json(value: Any) -> str:
    """A JSON value as one line of text for a person (tool arguments, a final output).

    Raises:
        ValueError: the value holds NaN or Infinity, which JSON cannot write.
    """
    return _dumps(value)


def print_json(make: Callable[[], Any], command: str, *, indent: int | None = None) -> None:
    """Print the JSON of what `make` builds, or fail the command if it is not JSON.

    Building happens here too, so that a value no JSON can hold (NaN, nesting too deep for
    Python) is one clear line whether the record or the encoder finds it.

    Raises:
        UsageError: naming why the output cannot be written (exit 2); nothing is printed.
    """
    try:
        text = _dumps(make(), indent)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{PROG} {command}: cannot write the output as JSON: {why(exc)}") from None
    print(text)


def why(exc: BaseException) -> str:
    """Why a value could not be read or written, for exceptions that name no line of ours."""
    if isinstance(exc, RecursionError):
        return "a value is nested too deeply"
    if isinstance(exc, UnicodeError):
        return "a string is not valid Unicode (a lone surrogate or bytes that are not UTF-8)"
    text = str(exc)
    if "JSON compliant" in text:  # json's own words for NaN and Infinity with allow_nan off
        return "a number is NaN or Infinity, which JSON does not have"
    return shown(text)


def error_text(exc: BaseException) -> str:
    """An error's message as one escaped line (a table's problems joined by `; `)."""
    if isinstance(exc, InvalidTableError):
        problems = "; ".join(shown(p) for p in exc.problems)
        return f"table '{shown(exc.table)}' is invalid ({len(exc.problems)} problems): {problems}"
    return shown(str(exc))
