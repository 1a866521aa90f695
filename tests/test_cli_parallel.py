"""`validate --jobs N`: several processes give exactly the report one process gives."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm.cli._parallel import AUTO_BYTES, auto_jobs, validate_in_parallel
from agentfsm.events import dump_event
from agentfsm.reducers import DEFAULT_REDUCER
from agentfsm.testing import legal_runs
from tests._cli_helpers import run_main

#: Run ids that two workers split between them (crc32 mod 2: 0, 1, 0, 1), so the report's
#: order of runs is the merge's, not one worker's.
IDS = ("run-4", "run-0", "run-5", "run-1")

#: What can go wrong in a line of a log (`None`: nothing).
FAULTS = st.sampled_from([None, "drop", "repeat", "garbage", "escape", "nested"])


def _interleaved(runs: list[list[Any]], order: list[int]) -> list[str]:
    """The runs' lines, interleaved in the drawn order (each run's own order kept)."""
    queues = [[dump_event(e) for e in events] for events in runs]
    out: list[str] = []
    for pick in itertools.chain(order, itertools.cycle(range(len(queues)))):
        live = [q for q in queues if q]
        if not live:
            return out
        out.append(live[pick % len(live)].pop(0))
    return out


def _spoiled(lines: list[str], fault: str | None, where: int) -> list[str]:
    """`lines` with one fault at `where` (a run id escaped or read from a nested value, a
    line dropped, repeated or not JSON)."""
    if fault is None or not lines:
        return lines
    at = where % len(lines)
    line = lines[at]
    if fault == "drop":
        return lines[:at] + lines[at + 1 :]
    if fault == "repeat":
        return [*lines[: at + 1], line, *lines[at + 1 :]]
    if fault == "garbage":
        return [*lines[:at], '{"run_id": "x", not json', *lines[at + 1 :]]
    if fault == "escape":  # the same id, spelled with an escape: the reader cannot tell
        return [ln.replace('"run_id":"run', '"run_id":"\\u0072un', 1) for ln in lines]
    # "nested": a run id inside a value, ahead of the real one
    return [*lines[:at], line.replace("{", '{"note":{"run_id":"elsewhere"},', 1), *lines[at + 1 :]]


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    runs=st.lists(legal_runs(min_events=2, max_events=12), min_size=1, max_size=4),
    order=st.lists(st.integers(0, 3), max_size=40),
    fault=FAULTS,
    where=st.integers(0, 200),
    form=st.sampled_from(["text", "json"]),
)
def test_two_processes_report_exactly_what_one_does(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    runs: list[list[Any]],
    order: list[int],
    fault: str | None,
    where: int,
    form: str,
) -> None:
    """Clean or spoiled, the log's exit status, report and errors are the same with
    `--jobs 2` as with `--jobs 1`."""
    renamed = [
        [e.model_copy(update={"run_id": f"r{i}"}) for e in run] for i, run in enumerate(runs)
    ]
    lines = _spoiled(_interleaved(renamed, order), fault, where)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    one = run_main(capsys, "validate", str(log), "--quiet", "--format", form, "--jobs", "1")
    two = run_main(capsys, "validate", str(log), "--quiet", "--format", form, "--jobs", "2")
    assert two == one
    if fault is None:  # clean: the processes answered it themselves
        assert validate_in_parallel(iter(lines), DEFAULT_REDUCER, 2) is not None


def test_a_clean_log_is_answered_in_parallel_and_a_broken_one_is_not() -> None:
    """The parallel path answers "clean" itself and leaves every finding to one process."""
    log = LogOfTwoRuns()
    report = validate_in_parallel(iter(log.lines), DEFAULT_REDUCER, 2)
    assert report is not None
    assert ([r.run_id for r in report.runs], report.events, report.lines) == (list(IDS[:2]), 6, 6)
    broken = [*log.lines[:3], *log.lines[4:]]  # run b skips a sequence
    assert validate_in_parallel(iter(broken), DEFAULT_REDUCER, 2) is None


def test_runs_are_listed_in_the_order_they_first_appear(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The second worker's run comes first in the log, so first in the report."""
    lines = LogOfTwoRuns().lines
    swapped = [lines[i ^ 1] for i in range(len(lines))]  # IDS[1] (worker 1) first
    log = tmp_path / "log.jsonl"
    log.write_text("".join(f"{line}\n" for line in swapped), encoding="utf-8")
    code, out, _ = run_main(capsys, "validate", str(log), "--quiet", "--jobs", "2")
    assert (code, [line.split()[0] for line in out.splitlines()[:2]]) == (0, [IDS[1], IDS[0]])


def test_auto_uses_every_core_only_for_a_large_file() -> None:
    """`--jobs auto`: one process below `AUTO_BYTES` or for a pipe, more from there on."""
    assert auto_jobs(None) == 1
    assert auto_jobs(AUTO_BYTES - 1) == 1
    assert auto_jobs(AUTO_BYTES) >= 1


class LogOfTwoRuns:
    """Two three-event runs, one for each worker of two, interleaved line by line."""

    def __init__(self) -> None:
        from agentfsm import LogBuilder

        logs = []
        for run_id in IDS[:2]:
            log = LogBuilder(run_id)
            log.add("run.started")
            log.add("model.started")
            log.add("model.completed", decision="final", output="ok")
            logs.append([dump_event(e) for e in log.events])
        self.lines = [line for pair in zip(*logs, strict=True) for line in pair]


class DyingReducer(type(DEFAULT_REDUCER)):  # type: ignore[misc]
    """The default reducer, whose process dies (as if killed) at run `IDS[1]`'s third event."""

    def reduce(self, record: Any, event: Any, ctx: Any = None) -> Any:
        if event.run_id == IDS[1] and event.sequence == 3:
            os._exit(9)
        return super().reduce(record, event, ctx)


def test_a_worker_that_dies_leaves_the_log_to_one_process() -> None:
    """No answer from a killed worker is no verdict: the caller checks the log itself."""
    lines = LogOfTwoRuns().lines  # both runs, one per worker
    assert validate_in_parallel(iter(lines), DyingReducer(), 2) is None
    assert validate_in_parallel(iter(lines), DEFAULT_REDUCER, 2) is not None  # the same, alive


def test_an_input_that_fails_midway_stops_every_worker() -> None:
    """The reader's error comes out as it is, at once, and no worker is left behind (each
    closes the pipe ends it inherited, so none waits on another's input)."""
    import multiprocessing

    def failing() -> Any:
        yield from LogOfTwoRuns().lines
        raise ValueError("the disk went away")

    with pytest.raises(ValueError, match=r"^the disk went away$"):
        validate_in_parallel(failing(), DEFAULT_REDUCER, 2)
    assert multiprocessing.active_children() == []
