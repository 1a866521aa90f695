"""What the command line prints: text from a log escaped.

Everything a log or a store holds is untrusted: a run id, a tool name or a reason may carry
a newline that fakes an output line, or a terminal escape that recolours or hides text.
`shown` is the one door such text goes through on its way to a person: whatever
`str.isprintable` rejects (controls, escapes, bidirectional overrides, lone surrogates,
line and paragraph separators) comes out as a Python-style escape (`\\n`, `\\x1b`,
`\\u202e`). A backslash already in the text is left alone: log lines are JSON, full of
escapes a person reads as they are, and it makes `shown` idempotent, so a message built
from shown parts can go through it again on its way out.
"""

from __future__ import annotations

from agentfsm.fsm.errors import InvalidTableError

__all__ = ["error_text", "shown"]

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


def error_text(exc: BaseException) -> str:
    """An error's message as one escaped line (a table's problems joined by `; `)."""
    if isinstance(exc, InvalidTableError):
        problems = "; ".join(shown(p) for p in exc.problems)
        return f"table '{shown(exc.table)}' is invalid ({len(exc.problems)} problems): {problems}"
    return shown(str(exc))
