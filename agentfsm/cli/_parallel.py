"""`validate --jobs N`: a large log checked by N worker processes, runs split among them.

Runs are independent: each is legal or not on its own lines alone. So the lines go to
workers by a hash of their run id, each worker folds its runs with the one streaming fold
(`validate_lines`), and the summaries come back in the order the runs first appeared. Parsing
is most of the cost of a line, and it is what the workers share out (each a process: the
parse holds the GIL).

The run id is read from the raw line with a pattern, not a parse, so the reader stays cheap.
A wrong read (the key inside a nested value, an escaped id) cannot pass unseen: a run split
between workers gives one of them a run that does not start at sequence 1, and a run read
under another id does not come back under the id it was sent with. Either way, like any
finding at all, the answer is "not clean", and the caller checks the log again in one
process, so every report with a finding is exactly the sequential one: its first problem in
file order, its messages, its counts. The parallel path only ever answers "clean" itself.

Workers are forked: they inherit the table and guards (a table's conditions are functions,
which need not pickle).
"""

from __future__ import annotations

import multiprocessing
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from multiprocessing.connection import Connection
from typing import Any

from agentfsm.events._lines import is_blank
from agentfsm.reducers.reduce import Reducer
from agentfsm.reducers.validate import RunSummary, ValidationReport, validate_lines

__all__ = ["AUTO_BYTES", "auto_jobs", "validate_in_parallel"]

#: From this size on, `--jobs auto` uses every core (up to four); below, one process.
AUTO_BYTES = 16 * 2**20
_MAX_AUTO = 4
_BATCH = 2000
# Lines by the thousand are bytes by the GiB when each is a few MiB: a batch is also sent
# once it holds this much text.
_BATCH_BYTES = 2**20
_RUN_ID = re.compile(r'"run_id"\s*:\s*"([^"\\]*)"')


def auto_jobs(size: int | None) -> int:
    """The workers `--jobs auto` uses for an input of `size` bytes (None: not a file)."""
    if size is None or size < AUTO_BYTES:
        return 1
    return max(1, min(_MAX_AUTO, os.cpu_count() or 1))


def validate_in_parallel(
    lines: Iterable[str], reducer: Reducer, jobs: int
) -> ValidationReport | None:
    """The report on `lines` when every run is clean; None when the log must be checked in
    one process (a finding, an unreadable run id, a worker's failure)."""
    context = multiprocessing.get_context("fork")
    ends = [context.Pipe() for _ in range(jobs)]
    every = [conn for pair in ends for conn in pair]
    workers = [
        context.Process(target=_work, args=(theirs, reducer, [c for c in every if c is not theirs]))
        for _, theirs in ends
    ]
    for worker in workers:
        worker.daemon = True
        worker.start()
    for _, theirs in ends:
        theirs.close()
    ours = [mine for mine, _ in ends]
    finished = False
    try:
        try:
            routed = _route(lines, ours)
        except OSError:  # a worker died and its pipe broke: one process will say it all
            routed = None
        answers = [_answer(conn) for conn in ours]
        finished = True
    finally:
        for conn in ours:
            conn.close()  # a worker still reading sees the end of its input
        for worker in workers:
            if not finished:  # interrupted (Ctrl-C, a failing input): nothing to wait for
                worker.kill()
            worker.join()
    if routed is None or any(answer is None for answer in answers):
        return None
    order, count = routed
    return _merged(order, count, answers)


def _answer(conn: Connection) -> Any:
    """A worker's answer; None when it died without one (killed, out of memory)."""
    try:
        return conn.recv()
    except (EOFError, OSError):
        return None


def _route(lines: Iterable[str], conns: list[Connection]) -> tuple[dict[str, int], int] | None:
    """Send each line to its run's worker; the runs in order of first appearance and the
    number of lines read, or None when a line's run id cannot be read from its text."""
    jobs = len(conns)
    batches: list[list[str]] = [[] for _ in range(jobs)]
    held = [0] * jobs
    order: dict[str, int] = {}
    count = 0
    readable = True
    for count, raw in enumerate(lines, start=1):  # noqa: B007  (count is the total read)
        if is_blank(raw):
            continue
        found = _RUN_ID.search(raw)
        if found is None:
            readable = False  # it is refused in one process, which names the line
            continue
        run_id = found.group(1)
        order.setdefault(run_id, len(order))
        index = zlib.crc32(run_id.encode()) % jobs
        batch = batches[index]
        batch.append(raw)
        held[index] += len(raw)
        if len(batch) >= _BATCH or held[index] >= _BATCH_BYTES:
            conns[index].send(batch)
            batches[index] = []
            held[index] = 0
    for index, conn in enumerate(conns):
        if batches[index]:
            conn.send(batches[index])
        conn.send(None)
    return (order, count) if readable else None


def _work(conn: Connection, reducer: Reducer, inherited: list[Connection]) -> None:
    """A worker: fold the lines sent until None; answer the clean report's parts, or None.

    It never raises (a forked worker's traceback would land on the user's terminal): what it
    cannot answer is None, and the one-process check then says what was wrong. It first
    closes the other pipe ends the fork gave it: holding another worker's writing end would
    keep that worker from ever seeing the end of its input.
    """
    for other in inherited:
        other.close()
    inbox = _Inbox(conn)
    answer: Any = None
    try:
        report = validate_lines(inbox.lines(), reducer=reducer)
        if report.ok and not report.findings:
            answer = (report.runs, report.events)
    except BaseException:  # noqa: BLE001, S110
        pass
    try:
        for _ in inbox.lines():  # a finding stops the fold: drain, so the reader never blocks
            pass
        conn.send(answer)
    except (OSError, EOFError):  # the reader is gone (it failed): nothing to answer
        pass
    finally:
        conn.close()


class _Inbox:
    """The lines a worker is sent, up to the None that ends them (read once)."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._ended = False

    def lines(self) -> Iterator[str]:
        while not self._ended:
            try:
                batch = self._conn.recv()
            except EOFError:  # the reader stopped (its input failed)
                batch = None
            if batch is None:
                self._ended = True
                return
            yield from batch


def _merged(order: dict[str, int], count: int, answers: list[Any]) -> ValidationReport | None:
    runs: list[RunSummary] = []
    events = 0
    for summaries, applied in answers:
        runs.extend(summaries)
        events += applied
    if sorted(r.run_id for r in runs) != sorted(order):
        return None  # a run came back under another id than it was read with
    runs.sort(key=lambda r: order[r.run_id])
    return ValidationReport(tuple(runs), (), events, count)
