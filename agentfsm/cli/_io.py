"""Streaming input with an optional progress bar, and colour only where it belongs."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TextIO

from agentfsm.cli._common import PROG, UsageError

__all__ = ["Style", "stream_lines"]

_BAR = 30


def stream_lines(path: Path, command: str, *, quiet: bool = False) -> Iterator[str]:
    """The lines of `path` (or of standard input for `-`), read lazily.

    A progress bar goes to stderr when stderr is a terminal, the input is a regular file
    and `quiet` is off: it advances by bytes read, so it costs nothing per line.

    Raises:
        UsageError: the file cannot be opened (missing, unreadable, a directory).
    """
    if str(path) == "-":
        yield from sys.stdin
        return
    try:
        handle = path.open(encoding="utf-8", errors="strict")
    except OSError as exc:
        raise UsageError(f"{PROG} {command}: cannot read '{path}': {exc.strerror}") from None
    with handle:
        total = _size(handle)
        if quiet or total is None or not sys.stderr.isatty():
            try:
                yield from handle
            except UnicodeDecodeError as exc:
                raise UsageError(f"{PROG} {command}: '{path}' is not UTF-8 text: {exc}") from None
            return
        yield from _with_progress(handle, total, sys.stderr)


def _size(handle: IO[str]) -> int | None:
    try:
        stat = os.fstat(handle.fileno())
    except OSError:
        return None
    return stat.st_size if stat.st_size > 0 else None


def _with_progress(handle: IO[str], total: int, out: TextIO) -> Iterator[str]:
    done = 0
    shown = -1
    for number, line in enumerate(handle, start=1):
        done += len(line)  # characters, close enough to bytes for a progress bar
        yield line
        if number % 4096 == 0:
            percent = min(100, done * 100 // total)
            if percent != shown:
                shown = percent
                filled = _BAR * percent // 100
                out.write(
                    f"\r[{'#' * filled}{'.' * (_BAR - filled)}] {percent:3d}% {number:,} lines"
                )
                out.flush()
    if shown >= 0:
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
