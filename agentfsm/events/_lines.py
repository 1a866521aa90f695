"""JSON Lines from a file or a stream, one bounded line at a time.

A reader that takes a whole line before measuring it can be made to hold anything:
`/dev/zero` is one endless line, a sparse file a gigabyte of one, a pipe need never send a
newline. So every reader of a file (the command line, the UI's `--log`, `read_events` and
the other readers of lines, given a file) goes through `iter_lines`, which reads in chunks
and refuses a line the moment it is longer than the limit: no reader holds more than one
line of `MAX_EVENT_BYTES` and a chunk.

Lines end at `\\n` only (a JSON string may hold U+2028 or a lone `\\r`), `\\r\\n` is one
end, and the last line may have none. Bytes are decoded as UTF-8, strictly.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any

from agentfsm.errors import EventFormatError
from agentfsm.events._bounds import MAX_EVENT_BYTES, utf8_size

__all__ = ["is_blank", "iter_lines", "lines_of"]

#: What one read asks for: far below the limit, so a chunk's whole lines are known to be
#: within it without measuring each (most lines are split, decoded and handed on in bulk).
CHUNK = 1 << 16


def iter_lines(file: IO[bytes] | IO[str], limit: int = MAX_EVENT_BYTES) -> Iterator[str]:
    """The lines of `file` (binary or text), without their ends, each at most `limit` bytes.

    Args:
        file: an open file, standard input, a pipe, `io.BytesIO`: anything with `read1`
            or `read`; the lines of a text stream are measured in UTF-8 bytes too.
        limit: the most bytes a line may hold, its end left out.

    Raises:
        EventFormatError: at the first line longer than `limit` (reading stops there, having
            held at most `limit` + 1 bytes of it and a chunk), or of bytes that are not
            UTF-8; naming the line. The lines before it are given first.
    """
    # read1 returns what one read of the stream gives: a pipe's lines come as they are sent.
    # Not a generator itself: every line would pass through one more frame.
    return _lines(getattr(file, "read1", None) or file.read, limit)


def _utf8(raw: bytes) -> str:
    return raw.decode("utf-8")


def _lines(read: Callable[[int], Any], limit: int) -> Iterator[str]:
    """The lines of the chunks `read` gives, bytes or text (as the first one is)."""
    lf: Any
    cr: Any
    decode: Callable[[Any], str]
    size: Callable[[Any], int]
    chunk = read(CHUNK)
    if isinstance(chunk, str):
        lf, cr, decode, size, widest = "\n", "\r", str, utf8_size, 4
    else:
        lf, cr, decode, size, widest = b"\n", b"\r", _utf8, len, 1
    # `widest`: the most bytes a unit of a chunk (a byte, a character) may take.
    number = 0  # the lines handed on (or refused)
    pieces: list[Any] = []  # the start of a line whose end is not read yet
    held = 0  # its bytes
    while chunk:
        first = chunk.find(lf)
        if first < 0:  # the line goes on
            pieces.append(chunk)
            held += size(chunk)
            if held > limit + 1:  # over, even if the next unit is the `\n` of a `\r\n`
                raise _too_long(limit, number + 1)
            chunk = read(CHUNK)
            continue
        start = 0
        if pieces:  # the line carried over ends here
            pieces.append(chunk[:first])
            number += 1
            yield _line(lf[:0].join(pieces), True, limit, number, cr, decode, size)
            pieces, held, start = [], 0, first + 1
        last = chunk.rfind(lf)
        if last >= start:  # whole lines, from start to the last `\n`
            body = chunk[start:last]
            try:
                # Short enough that no line in it can be over: decoded and split in one go.
                text = decode(body) if len(body) * widest <= limit else None
            except UnicodeDecodeError:
                text = None  # line by line below, to name the line
            if text is None:
                for raw in body.split(lf):
                    number += 1
                    yield _line(raw, True, limit, number, cr, decode, size)
            else:
                lines = text.split("\n")
                if "\r" in text:
                    lines = [line[:-1] if line[-1:] == "\r" else line for line in lines]
                number += len(lines)
                yield from lines
        rest = chunk[last + 1 :]
        if rest:
            pieces, held = [rest], size(rest)
            if held > limit + 1:
                raise _too_long(limit, number + 1)
        chunk = read(CHUNK)
    if pieces:  # the last line, without an end
        yield _line(lf[:0].join(pieces), False, limit, number + 1, cr, decode, size)


def _line(
    raw: Any,
    ended: bool,
    limit: int,
    number: int,
    cr: Any,
    decode: Callable[[Any], str],
    size: Callable[[Any], int],
) -> str:
    """One line, its `\\n` cut off already (`ended`): its `\\r` cut too, measured, decoded."""
    if ended and raw[-1:] == cr:
        raw = raw[:-1]
    if size(raw) > limit:
        raise _too_long(limit, number)
    try:
        return decode(raw)
    except UnicodeDecodeError as exc:
        raise EventFormatError(
            [f"not UTF-8 text (byte {exc.start + 1}: {exc.reason})"], line=number
        ) from None


def _too_long(limit: int, number: int) -> EventFormatError:
    why = f"the line is longer than {limit:,} bytes, the limit for one event"
    return EventFormatError([f"{why}; reading stopped there"], line=number)


def lines_of(source: Iterable[str | bytes]) -> Iterable[str | bytes]:
    """The lines of `source`: read with `iter_lines` when it is a file (a file iterated
    as it is would hand over each line whole, however long), else `source` itself."""
    if isinstance(source, io.IOBase):
        return iter_lines(source)  # type: ignore[arg-type]
    return source


def is_blank(line: str | bytes) -> bool:
    """Whether `line` holds only whitespace, found without copying it (as `strip` would)."""
    return not line or line.isspace()
