"""The one bounded line reader (`agentfsm.events._lines`), and `read_events` on files.

A line is refused the moment reading passes the limit, so no input can make a reader hold
more than one bounded line: `/dev/zero`, a sparse file, a pipe that never sends a newline.
"""

from __future__ import annotations

import io
import tracemalloc
from collections.abc import Callable, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm import EventFormatError, dump_event, parse_event, read_events
from agentfsm.diagrams import trajectory_from_jsonl
from agentfsm.events import iter_lines, make_event
from agentfsm.events._bounds import MAX_EVENT_BYTES
from agentfsm.events._lines import CHUNK
from agentfsm.reducers.validate import validate_lines
from agentfsm.ui import render_report
from tests._cli_helpers import waiting_log

#: Every character `str.splitlines` ends a line at: the reader ends one at `\n` only, so
#: the property below compares the two on text whose lines hold none of them.
BOUNDARIES = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"

line_text = st.text(
    st.characters(exclude_characters=BOUNDARIES, exclude_categories=("Cs",)), max_size=40
)


def line_of_size(size: int) -> str:
    """A `run.started` line of exactly `size` bytes (its objective padded)."""
    short = make_event(
        "run.started", run_id="r", sequence=1, occurred_at="2026-09-01T10:00:00Z", objective=""
    )
    line = dump_event(short.model_copy(update={"objective": "x" * (size - len(dump_event(short)))}))
    assert len(line.encode()) == size
    return line


def _over(limit: int) -> tuple[str, ...]:
    """The problem of a line over `limit`, as the reader words it."""
    why = f"the line is longer than {limit:,} bytes, the limit for one event"
    return (f"{why}; reading stopped there",)


def _read(stream: io.IOBase, limit: int) -> tuple[list[str], EventFormatError | None]:
    reader = iter_lines(stream, limit)  # type: ignore[arg-type]
    lines: list[str] = []
    while True:
        try:
            lines.append(next(reader))
        except StopIteration:
            return lines, None
        except EventFormatError as exc:
            return lines, exc


class Zeros(io.RawIOBase):
    """`/dev/zero` after an optional prefix, counting the bytes it hands out."""

    def __init__(self, prefix: bytes = b"") -> None:
        self.prefix = prefix
        self.given = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        size = len(buffer)
        chunk = self.prefix[:size]
        self.prefix = self.prefix[size:]
        chunk += bytes(size - len(chunk))
        buffer[:size] = chunk
        self.given += size
        return size


class Trickle(io.RawIOBase):
    """A pipe that hands over at most `piece` bytes a read, however many are asked for."""

    def __init__(self, data: bytes, piece: int) -> None:
        self.data = data
        self.piece = piece

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        given = self.data[: min(len(buffer), self.piece)]
        self.data = self.data[len(given) :]
        buffer[: len(given)] = given
        return len(given)


class TrickleText(io.TextIOBase):
    """A text stream that hands over at most `piece` characters a read."""

    def __init__(self, text: str, piece: int) -> None:
        self.text = text
        self.piece = piece

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        given = self.text[: min(size if size is not None and size >= 0 else 1 << 30, self.piece)]
        self.text = self.text[len(given) :]
        return given


class TestIterLines:
    @given(
        lines=st.lists(st.tuples(line_text, st.sampled_from(["\n", "\r\n"])), max_size=12),
        last_ended=st.booleans(),
        limit=st.integers(0, 48),
        piece=st.integers(1, 64),
    )
    def test_the_lines_of_str_splitlines_up_to_the_first_over_the_limit(
        self, lines: list[tuple[str, str]], last_ended: bool, limit: int, piece: int
    ) -> None:
        """For any text cut into lines of any length (ended by `\\n` or `\\r\\n`, the last
        one maybe not), read in pieces of any size (a line, a `\\r\\n`, a character cut
        between reads): the lines `str.splitlines` gives, up to the first over `limit`
        bytes, which is refused by its number."""
        text = "".join(line + end for line, end in lines)
        if lines and not last_ended:
            text = text.removesuffix(lines[-1][1])
        expected: list[str] = []
        refused: int | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            if len(line.encode()) > limit:
                refused = number
                break
            expected.append(line)
        data = text.encode()
        streams: list[io.IOBase] = [
            io.BytesIO(data),
            Trickle(data, piece),
            io.BufferedReader(Trickle(data, piece), buffer_size=piece),
            io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline=""),
            TrickleText(text, piece),
        ]
        for stream in streams:
            got, error = _read(stream, limit)
            assert got == expected
            if refused is None:
                assert error is None
            else:
                assert error is not None
                assert (error.line, error.problems) == (refused, _over(limit))

    def test_only_a_newline_ends_a_line(self) -> None:
        """U+2028, U+0085 and a lone `\\r` may sit inside a JSON string: they stay on their
        line (str.splitlines would cut there)."""
        text = "a\u2028b\rc\x85d\r\ne\n"
        assert list(iter_lines(io.BytesIO(text.encode()))) == ["a\u2028b\rc\x85d", "e"]

    def test_a_line_at_the_limit_is_read_and_one_byte_more_is_not(self) -> None:
        """The limit counts the line's bytes without its end, `\\n` or `\\r\\n`."""
        for end in (b"\n", b"\r\n", b""):
            assert list(iter_lines(io.BytesIO(b"x" * 10 + end), 10)) == ["x" * 10]
            with pytest.raises(EventFormatError) as info:
                list(iter_lines(io.BytesIO(b"x" * 11 + end), 10))
            assert (info.value.line, info.value.problems) == (1, _over(10))

    def test_a_line_of_multibyte_text_is_measured_in_bytes(self) -> None:
        """From a text stream too: three characters of three bytes each are nine bytes."""
        assert list(iter_lines(io.StringIO("\u20ac\u20ac\u20ac\n"), 9)) == ["\u20ac" * 3]
        with pytest.raises(EventFormatError) as info:
            list(iter_lines(io.StringIO("ok\n\u20ac\u20ac\u20ac\n"), 8))
        assert (info.value.line, info.value.problems) == (2, _over(8))

    def test_bytes_that_are_not_utf8_are_refused_by_line_and_byte(self) -> None:
        """Decoded strictly: the line and the byte are named, the lines before are read."""
        reader = iter_lines(io.BytesIO(b'ok\n{"run_id": "caf\xe9"}\n'))
        assert next(reader) == "ok"
        with pytest.raises(EventFormatError) as info:
            next(reader)
        assert str(info.value) == (
            "line 2: not a valid event: not UTF-8 text (byte 16: invalid continuation byte)"
        )

    def test_an_endless_line_is_refused_after_the_limit_and_one_buffer(self) -> None:
        """`/dev/zero` behind a valid line: refused at line 2, having taken from the stream
        no more than the line before, the limit and its end, and one chunk."""
        first = waiting_log()[0].encode() + b"\n"
        zeros = Zeros(first)
        reader = iter_lines(io.BufferedReader(zeros, buffer_size=4096), 100_000)
        assert next(reader) == first.decode().rstrip("\n")
        with pytest.raises(EventFormatError) as info:
            next(reader)
        assert (info.value.line, info.value.problems) == (2, _over(100_000))
        assert zeros.given <= len(first) + 100_002 + CHUNK

    def test_dev_zero_is_refused_holding_about_one_line(self) -> None:
        """The real `/dev/zero` at the real limit: what was allocated at the peak is a small
        multiple of one line, never the stream."""
        tracemalloc.start()
        try:
            with open("/dev/zero", "rb") as zero, pytest.raises(EventFormatError) as info:
                next(iter_lines(zero))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert (info.value.line, info.value.problems) == (1, _over(MAX_EVENT_BYTES))
        assert peak < 3 * MAX_EVENT_BYTES


def _read_all(read: Callable[[io.IOBase], object], stream: io.IOBase) -> object:
    result = read(stream)
    return list(result) if isinstance(result, Iterator) else result


READERS: dict[str, Callable[[io.IOBase], object]] = {
    "read_events": read_events,
    "validate_lines": validate_lines,
    "trajectory_from_jsonl": trajectory_from_jsonl,
    "render_report": lambda log: render_report(log=log),
}


@pytest.mark.parametrize("name", READERS)
def test_every_reader_of_lines_reads_a_file_with_the_bound(name: str) -> None:
    """Handed a file, each public reader of JSON Lines reads it with `iter_lines`: a line
    twice the limit long is refused as it is read, by its number, not taken whole."""
    first = waiting_log()[0].encode() + b"\n"
    stream = io.BytesIO(first + bytes(2 * MAX_EVENT_BYTES) + b"\n")
    with pytest.raises(EventFormatError) as info:
        _read_all(READERS[name], stream)
    assert (info.value.line, info.value.problems) == (2, _over(MAX_EVENT_BYTES))
    assert stream.tell() <= len(first) + MAX_EVENT_BYTES + 2 + CHUNK


class TestReadEventsFromFiles:
    def test_a_binary_file_and_a_text_file(self) -> None:
        """A file, binary or text, is read line by line; blank lines count but are skipped."""
        text = "\n".join([waiting_log()[0], "", "  ", waiting_log()[1]]) + "\n"
        for stream in (io.BytesIO(text.encode()), io.StringIO(text)):
            got = [(n, dump_event(e)) for n, e in read_events(stream)]
            assert got == [(1, waiting_log()[0]), (4, waiting_log()[1])]

    def test_an_endless_line_in_a_file_stops_the_reading_there(self) -> None:
        """The events before are given; the endless line is refused by its number, and
        the stream was not read much past the limit."""
        first = waiting_log()[0].encode() + b"\n\n"
        zeros = Zeros(first)
        reader = read_events(io.BufferedReader(zeros, buffer_size=8192))
        assert next(reader)[0] == 1
        with pytest.raises(EventFormatError) as info:
            next(reader)
        assert (info.value.line, info.value.problems) == (3, _over(MAX_EVENT_BYTES))
        assert zeros.given <= len(first) + MAX_EVENT_BYTES + 2 + CHUNK

    def test_a_long_line_in_memory_is_measured_without_a_copy(self) -> None:
        """Lines already in memory (a list, `readlines()`) are checked for length before
        anything copies them: no blank-line test that strips, no encoding to measure."""
        huge = "x" * (MAX_EVENT_BYTES + 1) + "\n"
        tracemalloc.start()
        try:
            with pytest.raises(EventFormatError) as info:
                next(read_events(iter([huge])))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert str(info.value) == (
            f"line 1: not a valid event: not JSON (the event is {MAX_EVENT_BYTES + 1:,} bytes "
            f"of JSON; at most {MAX_EVENT_BYTES:,} are allowed)"
        )
        assert peak < 2**20

    def test_a_line_in_memory_is_measured_without_its_end(self) -> None:
        """A line of exactly the limit is an event with its `\\n` or `\\r\\n` (as
        `readlines()` gives it) as without; a byte more is refused, the end still not
        counted."""
        for end in ("", "\n", "\r\n"):
            for line in (
                line_of_size(MAX_EVENT_BYTES) + end,
                (line_of_size(MAX_EVENT_BYTES) + end).encode(),
            ):
                assert next(read_events([line]))[0] == 1
            with pytest.raises(EventFormatError) as info:
                next(read_events([line_of_size(MAX_EVENT_BYTES + 1) + end]))
            assert info.value.problems == (
                f"not JSON (the event is {MAX_EVENT_BYTES + 1:,} bytes of JSON; at most "
                f"{MAX_EVENT_BYTES:,} are allowed)",
            )

    def test_lines_in_memory_are_read_as_before(self) -> None:
        """An iterable of lines (str or bytes, with or without their ends) is still taken."""
        lines: list[str | bytes] = [waiting_log()[0] + "\n", b"\r\n", waiting_log()[1].encode()]
        assert [n for n, _ in read_events(lines)] == [1, 3]
        assert parse_event(waiting_log()[1]) == next(read_events(lines[2:]))[1]
