"""Streaming input with an optional progress bar, and colour only where it belongs."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TextIO

from agentfsm.cli._common import PROG, UsageError
from agentfsm.cli._output import shown, why
from agentfsm.errors import AgentFSMError, EventFormatError
from agentfsm.events._lines import iter_lines

__all__ = ["LineCounter", "Style", "stream_lines"]

_BAR = 30


def stream_lines(path: Path, command: str, *, quiet: bool = False) -> Iterator[str]:
    """The lines of `path` (or of standard input for `-`), read lazily and bounded.

    Every log-reading command reads here, through the one bounded reader
    (`agentfsm.events._lines.iter_lines`): lines are split on `\\n` only and decoded one by
    one, so a JSON string holding U+2028 stays on its line and bytes that are not UTF-8 are
    named by line, whatever the locale (a C locale would otherwise turn them into lone
    surrogates on standard input); a line is refused the moment it is longer than one event
    may be, so `/dev/zero` or a pipe that never sends a newline costs one line of memory.

    A progress bar goes to stderr when stderr is a terminal, the input is a regular file
    and `quiet` is off: it advances by bytes read, so it costs nothing per line.

    Raises:
        UsageError: the file cannot be opened (missing, unreadable, a directory), or a line
            is too long or not UTF-8 (naming the input and the line).
    """
    if str(path) == "-":
        if sys.stdin is None:  # started with standard input closed (`<&-`)
            raise UsageError(f"{PROG} {command}: standard input is closed")
        # A text stream put in place of stdin (a test, an embedding) has no buffer.
        source: IO[bytes] | IO[str] = getattr(sys.stdin, "buffer", sys.stdin)
        yield from _bounded(source, "standard input", command)
        return
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise UsageError(
            f"{PROG} {command}: cannot read '{shown(str(path))}': {exc.strerror}"
        ) from None
    with handle:
        total = _size(handle)
        lines = _bounded(handle, f"'{shown(str(path))}'", command)
        if quiet or total is None or not sys.stderr.isatty():
            yield from lines
        else:
            yield from _with_progress(lines, total, sys.stderr)


def _bounded(source: IO[bytes] | IO[str], name: str, command: str) -> Iterator[str]:
    try:
        yield from iter_lines(source)
    except EventFormatError as exc:  # the input cannot be read as lines: nothing is checked
        raise UsageError(f"{PROG} {command}: {name}: {exc}") from None


class LineCounter:
    """Counts the lines a reader takes, so an error while one is checked can name it.

    The library refuses a line that is not an event with a `Finding` or an
    `EventFormatError`; what it does not foresee (nesting too deep for Python's recursion,
    a NaN reaching a digest, text that is not Unicode) surfaces as a bare `RecursionError`,
    `ValueError` or `UnicodeError`. `checking` turns those into the usage error a line that
    is not an event gets: one line on stderr, exit 2.
    """

    def __init__(self, command: str) -> None:
        self.command = command
        self.line = 0
        self.done = False

    def count(self, lines: Iterable[str]) -> Iterator[str]:
        """Pass `lines` through, counting."""
        for self.line, raw in enumerate(lines, start=1):
            yield raw
        self.done = True

    @contextmanager
    def checking(self) -> Iterator[None]:
        """Turn what a hostile line makes the library raise into a usage error."""
        try:
            yield
        except (RecursionError, ValueError, UnicodeError) as exc:
            if isinstance(exc, AgentFSMError):  # EventFormatError is a ValueError: its own way
                raise
            # Once every line was read (a trajectory folds after parsing), which line is lost.
            where = f"line {self.line}:" if self.line and not self.done else "a line is"
            raise UsageError(
                f"{PROG} {self.command}: {where} not a valid event: {why(exc)}"
            ) from None


def _size(handle: IO[bytes]) -> int | None:
    try:
        stat = os.fstat(handle.fileno())
    except OSError:
        return None
    return stat.st_size if stat.st_size > 0 else None


def _with_progress(lines: Iterable[str], total: int, out: TextIO) -> Iterator[str]:
    done = 0
    drawn = -1
    try:
        for number, line in enumerate(lines, start=1):
            done += len(line)  # characters, close enough to bytes for a progress bar
            yield line
            if number % 4096 == 0:
                percent = min(100, done * 100 // total)
                if percent != drawn:
                    drawn = percent
                    filled = _BAR * percent // 100
                    bar = f"[{'#' * filled}{'.' * (_BAR - filled)}]"
                    out.write(f"\r{bar} {percent:3d}% {number:,} lines")
                    out.flush()
    finally:  # however the reading ends (a line refused too): what is printed next starts clean
        if drawn >= 0:
            out.write("\r" + " " * (_BAR + 30) + "\r")
            out.flush()


class Style:
    """ANSI colours when writing to a terminal and `NO_COLOR` is not set; plain otherwise."""

    def __init__(self, stream: TextIO) -> None:
        self.enabled = stream.isatty() and not os.environ.get("NO_COLOR")

    def _wrap(self, code: str, text: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text

    def good(self, text: str) -> str:
        """Green: a run that ended well, a check that passed."""
        return self._wrap("32", text)

    def bad(self, text: str) -> str:
        """Red: an error."""
        return self._wrap("31", text)

    def dim(self, text: str) -> str:
        """Grey: context around the point."""
        return self._wrap("2", text)

    def status(self, status: str, terminal: bool) -> str:
        """A run status, coloured by how it ended."""
        if status == "completed":
            return self.good(status)
        if status in ("failed", "terminated"):
            return self.bad(status)
        return status if terminal else self.dim(status)
