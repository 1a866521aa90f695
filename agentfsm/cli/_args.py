"""Argument types: what a run id, a person, a reason or a path must be, checked at the door.

Each is an argparse `type=`, so a bad value is a usage error naming the argument (exit 2)
before any store is opened: a NUL would reach PostgreSQL as a driver error, a lone
surrogate (argv bytes that are not UTF-8) would fail deep in a SQLite bind, and an empty
approver would fail the event's own validation with a traceback's worth of pydantic.
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from agentfsm.cli._output import shown

__all__ = ["digest", "identity", "path", "reason", "run_id", "seconds", "text"]

#: The longest a command waits for anything (a day): a typo must not hang it for ever.
MAX_WAIT = 86_400.0

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")


def _problem(value: str) -> str | None:
    if "\0" in value:
        return "must not contain NUL"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # only lone surrogates fail: argv bytes that were not UTF-8
        return "must be UTF-8 text (it holds a lone surrogate)"
    return None


def _checked(what: str, value: str, *, empty_ok: bool) -> str:
    problem = _problem(value)
    if problem is None and not empty_ok and not value.strip():
        problem = "must not be empty"
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{what} {problem}: '{shown(value)}'")
    return value


def run_id(value: str) -> str:
    """A run or action id: not empty, no NUL, valid UTF-8."""
    return _checked("an id", value, empty_ok=False)


def identity(value: str) -> str:
    """Who approved, refused or asked: not empty (or blank), no NUL, valid UTF-8."""
    return _checked("a name", value, empty_ok=False)


def reason(value: str) -> str:
    """A reason an event requires (why a run was migrated): not empty (or blank), no NUL,
    valid UTF-8."""
    return _checked("a reason", value, empty_ok=False)


def text(value: str) -> str:
    """Free text stored in an event (a reason): may be empty; no NUL, valid UTF-8."""
    return _checked("the text", value, empty_ok=True)


def path(value: str) -> Path:
    """A file path: no NUL (the one byte no file system takes); other bytes pass through."""
    if "\0" in value:
        raise argparse.ArgumentTypeError(f"a path must not contain NUL: '{shown(value)}'")
    if not value:
        raise argparse.ArgumentTypeError("a path must not be empty")
    return Path(value)


def digest(value: str) -> str:
    """An arguments digest as `agentfsm approve` prints it: `sha256:` and 64 hex digits."""
    if not _DIGEST.match(value):
        raise argparse.ArgumentTypeError(
            f"a digest is 'sha256:' and 64 lower-case hex digits, got '{shown(value)}'"
        )
    return value


def seconds(value: str) -> float:
    """A time to wait, in seconds: a number from 0 to `MAX_WAIT` (a day)."""
    try:
        found = float(value)
    except ValueError:
        found = math.nan
    if not 0 <= found <= MAX_WAIT:  # NaN fails both
        raise argparse.ArgumentTypeError(
            f"want seconds from 0 to {MAX_WAIT:g}, got '{shown(value)}'"
        )
    return found
