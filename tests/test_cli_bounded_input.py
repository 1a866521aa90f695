"""Every command that reads JSON Lines holds at most one bounded line (issue 25, item 2).

`agentfsm validate /dev/zero` once grew to 12 GB in 30 s: the 8 MiB limit of one event's
line was checked after the line was in memory. Now each reader stops at the limit and says
so in one line on stderr, exit 2. The real console script runs here as a user runs it,
under an address-space cap (so a regression fails by running out of memory instead of
eating a shared machine) and a wall deadline; its peak resident memory comes from the
kernel (`VmHWM`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import attrs
import pytest

from agentfsm.events import dump_event, make_event
from agentfsm.events._bounds import MAX_EVENT_BYTES
from tests._cli_helpers import run_main, waiting_log
from tests.test_lines import line_of_size

#: The address space the child may map: several times what a bounded reader needs, far
#: below what an unbounded one takes.
CAP = 1 << 30
#: Resident memory a command may reach on hostile input (it needs ~50 MiB to start).
PEAK = 100 * 2**20
#: Generous on a shared machine; an unbounded reader ran for minutes.
DEADLINE = 15.0
#: The child caps its own address space, runs the command line, and writes its peak resident
#: memory to the file `argv[2]`: VmHWM, which starts afresh at exec (a child's `ru_maxrss`
#: from `wait4` would count the pages of the test process it was forked from).
_CAPPED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]),) * 2)
from agentfsm.cli import main
try:
    code = main(sys.argv[3:])
finally:
    with open("/proc/self/status") as status, open(sys.argv[2], "w") as out:
        out.write(next(line for line in status if line.startswith("VmHWM:")).split()[1])
sys.exit(code)
"""


def _over(command: str, name: str, line: int) -> str:
    return (
        f"agentfsm {command}: {name}: line {line}: not a valid event: the line is longer than "
        f"{MAX_EVENT_BYTES:,} bytes, the limit for one event; reading stopped there\n"
    )


@attrs.frozen
class Capped:
    """How a capped command ended: status, output, peak resident bytes, wall seconds."""

    code: int
    out: str
    err: str
    peak: int
    seconds: float


def run_capped(*argv: str, stdin: IO[bytes] | int = subprocess.DEVNULL) -> Capped:
    """`agentfsm ARGV` under `CAP`, killed at `DEADLINE`."""
    with tempfile.TemporaryDirectory() as tmp:
        peak, out, err = (Path(tmp) / name for name in ("peak", "out", "err"))
        start = time.monotonic()
        with out.open("wb") as stdout, err.open("wb") as stderr:
            child = subprocess.Popen(
                [sys.executable, "-c", _CAPPED, str(CAP), str(peak), *argv],
                stdin=stdin, stdout=stdout, stderr=stderr, env={**os.environ, "NO_COLOR": "1"},
            )  # fmt: skip
            try:
                code = child.wait(DEADLINE)
            except subprocess.TimeoutExpired:
                child.kill()
                code = child.wait()
        seconds = time.monotonic() - start
        return Capped(
            code,
            out.read_bytes().decode("utf-8", "backslashreplace"),
            err.read_bytes().decode("utf-8", "backslashreplace"),
            int(peak.read_text() or 0) * 1024 if peak.exists() else 0,
            seconds,
        )


def assert_refused(result: Capped, message: str) -> None:
    """Exit 2, the one line `message` on stderr, nothing on stdout, within the bounds."""
    assert (result.code, result.out, result.err) == (2, "", message)
    assert 0 < result.peak < PEAK, f"peak RSS {result.peak / 2**20:.0f} MiB"
    assert result.seconds < DEADLINE


def _sparse(path: Path, size: int, before: Sequence[str] = (), after: Sequence[str] = ()) -> Path:
    """`before`, then `size` zero bytes as a hole (no disk used), then `after`."""
    with path.open("wb") as handle:
        handle.write("".join(f"{line}\n" for line in before).encode())
        handle.seek(size, os.SEEK_CUR)
        handle.write("".join(f"\n{line}" for line in after).encode() + b"\n")
    return path


LOG_COMMANDS = [
    ["validate"],
    ["replay"],
    ["inspect"],
    ["diagram", "--run"],
    ["report"],
    ["validate", "--format", "json", "--all"],
]


@pytest.mark.parametrize("command", LOG_COMMANDS, ids=" ".join)
def test_dev_zero(command: list[str]) -> None:
    """`/dev/zero` is one endless line: refused at line 1, in bounded memory and time."""
    assert_refused(run_capped(*command, "/dev/zero"), _over(command[0], "'/dev/zero'", 1))


@pytest.mark.parametrize("command", [["validate"], ["replay"], ["diagram", "--run"]], ids=" ".join)
def test_dev_zero_on_standard_input(command: list[str]) -> None:
    """`-` reads standard input, a file or a pipe, with the same bound."""
    with open("/dev/zero", "rb") as zero:
        result = run_capped(*command, "-", stdin=zero)
    assert_refused(result, _over(command[0], "standard input", 1))


def test_a_pipe_that_never_sends_a_newline() -> None:
    """`cat /dev/zero | agentfsm validate -`: the writer is left behind, not waited for."""
    cat = subprocess.Popen(["cat", "/dev/zero"], stdout=subprocess.PIPE)
    assert cat.stdout is not None
    try:
        result = run_capped("validate", "-", stdin=cat.stdout)
    finally:
        cat.stdout.close()
        cat.kill()
        cat.wait()
    assert_refused(result, _over("validate", "standard input", 1))


def test_a_sparse_gigabyte(tmp_path: Path) -> None:
    """A 1 GB file of zeros (a hole: nothing on disk) is one line over the limit; the file
    is large enough for `--jobs auto`, so the parallel reader is bounded too."""
    log = _sparse(tmp_path / "sparse.jsonl", 1 << 30)
    assert_refused(run_capped("validate", str(log)), _over("validate", f"'{log}'", 1))


def test_a_long_line_in_the_middle_of_a_valid_log(tmp_path: Path) -> None:
    """Three good events, 300 MB without a newline, more good events: refused at line 4,
    the long line, naming the limit."""
    good = waiting_log()
    log = _sparse(tmp_path / "middle.jsonl", 300 * 10**6, before=good[:3], after=good[3:])
    for command in ("validate", "replay"):
        assert_refused(run_capped(command, str(log)), _over(command, f"'{log}'", 4))


def test_the_ui_log_source(tmp_path: Path) -> None:
    """`ui --log` reads its file with the same bound, and refuses before it serves."""
    log = _sparse(tmp_path / "sparse.jsonl", 1 << 30)
    result = run_capped("ui", "--log", str(log), "--port", "0")
    assert_refused(result, _over("ui", f"'{log}'", 1))


def _flat_log(path: Path, pairs: int) -> Path:
    """One run paused and resumed `pairs` times, a blank line after each event: the log
    grows, the run's record does not."""
    events = [make_event("run.started", run_id="r", sequence=1, occurred_at=_AT)]
    for _ in range(pairs):
        for kind, fields in (("run.paused", {"reason": "wait"}), ("run.resumed", {})):
            sequence = len(events) + 1
            events.append(
                make_event(kind, run_id="r", sequence=sequence, occurred_at=_AT, **fields)
            )
    with path.open("w", encoding="utf-8") as out:
        for event in events:
            out.write(dump_event(event) + "\n\n")
    return path


_AT = "2026-09-01T10:00:00Z"


def test_many_short_lines_stream_in_flat_memory(tmp_path: Path) -> None:
    """Sixteen times the lines (blank and valid) costs no more memory than one: a reader
    holds a line, not the file."""
    small = run_capped("validate", str(_flat_log(tmp_path / "small.jsonl", 5_000)), "--jobs", "1")
    large = run_capped("validate", str(_flat_log(tmp_path / "large.jsonl", 80_000)), "--jobs", "1")
    assert (small.code, large.code) == (0, 0)
    assert large.out.endswith("ok: 160,001 events in 1 run(s), 320,002 lines\n")
    assert large.peak - small.peak < 8 * 2**20, (small.peak, large.peak)


@pytest.mark.parametrize("end", ["\n", "\r\n", ""], ids=["LF", "CRLF", "no end"])
def test_a_line_exactly_at_the_limit_still_parses(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, end: str
) -> None:
    """The limit is the line's bytes without its end: a line of exactly the limit is an
    event, one byte more is refused by the reader."""
    log = tmp_path / "limit.jsonl"
    log.write_bytes((line_of_size(MAX_EVENT_BYTES) + end).encode())
    code, out, err = run_main(capsys, "validate", str(log))
    assert (code, out.splitlines()[-1], err) == (0, "ok: 1 events in 1 run(s), 1 lines", "")
    log.write_bytes((line_of_size(MAX_EVENT_BYTES + 1) + end).encode())
    assert run_main(capsys, "validate", str(log)) == (2, "", _over("validate", f"'{log}'", 1))


@pytest.fixture(scope="module")
def long_lines(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 lines of 5 MB, each under the limit (120 MB): more than a reader may hold at once,
    though it may hold any one of them."""
    path = tmp_path_factory.mktemp("long") / "long.jsonl"
    filler = "x" * 5_000_000
    with path.open("w", encoding="utf-8") as out:
        for n in range(24):
            out.write(f'{{"run_id": "r{n}", "objective": "{filler}"}}\n')
    return path


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_lines_under_the_limit_are_not_gathered(long_lines: Path, jobs: str) -> None:
    """Neither the look-ahead for the log's table nor the batches sent to `--jobs` workers
    hold lines by the thousand whatever their length: bounded in bytes too."""
    result = run_capped("validate", str(long_lines), "--jobs", jobs)
    first = (
        "error (format): line 1, run 'r0': not a valid event: field 'type' is missing; "
        "expected one of "
    )
    assert (result.code, result.err, result.out.startswith(first)) == (2, "", True)
    assert 0 < result.peak < PEAK, f"peak RSS {result.peak / 2**20:.0f} MiB"


def test_the_progress_bar_is_cleared_before_the_refusal(tmp_path: Path) -> None:
    """With stderr a terminal the bar is drawn as lines are read; a line refused after it
    still ends as one clean line on the terminal: the bar is wiped first."""
    log = _sparse(tmp_path / "late.jsonl", MAX_EVENT_BYTES + 10, before=[""] * 5000)
    leader, follower = os.openpty()
    try:
        child = subprocess.run(
            [sys.executable, "-m", "agentfsm", "validate", str(log)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=follower, check=False,
            env={**os.environ, "NO_COLOR": "1"}, timeout=DEADLINE,
        )  # fmt: skip
        os.close(follower)
        shown = b""
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal's other end is closed: all is read
                break
            if not data:
                break
            shown += data
    finally:
        os.close(leader)
    assert (child.returncode, child.stdout) == (2, b"")
    text = shown.decode()  # the terminal ends each line with \r\n
    assert text.startswith(f"\r[{'.' * 30}]   0% 4,096 lines\r")  # the bar was drawn
    message = _over("validate", f"'{log}'", 5001).removesuffix("\n")
    assert text.endswith(f"\r{message}\r\n")  # and wiped: the message starts its line
