"""The command line on large inputs: `validate`'s speed and memory, and every verb's growth.

By default, `agentfsm validate` on a large log: events/s and peak memory, in a child process.
It builds a seeded JSON Lines file of about 1,000,000 events in which 64 runs are live at
any moment (lines of different runs interleaved, as a shared log would have them), then runs
the real console script on it and reads the child's peak resident memory from the kernel.
The runs are the benchmark corpus (about twenty events each) by default; `--calls N` makes
them long-horizon runs of N tool calls each instead (`benchmarks/growth.py`'s shape, five
events a call), where a run's ledger holds thousands of actions while it is live.

`--growth` times every verb that reads a log or a store (validate, replay, inspect,
diagram --run, report, export, runs) at 10,000, 100,000 and 200,000 runs of four events
each, and (all but `runs`) on one run of as many events: CPU time per event, in a child
process that has imported agentfsm before its clock starts. Flat means linear: `--check`
exits non-zero when the largest input costs more than 1.5x the smallest's per event (as
`growth.py --check` does for a run's length). `schema` and `check-table` read neither:
their input is a table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm import Event, SQLiteEventStore, dump_event, parse_event
from benchmarks.corpus import build_corpus
from benchmarks.growth import long_run

# The child reports its own high-water mark from /proc (VmHWM starts afresh at exec, unlike
# ru_maxrss, which would still count the pages of this process that the fork copied), and the
# largest of its worker processes' (`--jobs`: each holds the live runs hashed to it).
_CHILD = """
import resource, sys
from agentfsm.cli import main
code = main(["validate", sys.argv[1], "--quiet", "--format", "json", *sys.argv[2:]])
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(hwm, workers, file=sys.stderr)
sys.exit(code)
"""


def long_runs(events: int, calls: int) -> list[list[Event]]:
    """Runs of `calls` tool calls each, totalling at least `events` events."""
    template = [dump_event(e) for e in long_run(calls, "r0")]
    count = -(-events // len(template))
    return [
        [
            parse_event(line.replace('"run_id":"r0"', f'"run_id":"long_{i:04d}"', 1))
            for line in template
        ]
        for i in range(count)
    ]


def write_log(path: Path, events: int, live: int, calls: int | None = None) -> int:
    """Write the interleaved log; return the number of lines."""
    source = build_corpus(events) if calls is None else long_runs(events, calls)
    runs = deque(deque(run) for run in source)
    active: deque[deque[object]] = deque()
    n = 0
    with path.open("w", encoding="utf-8") as out:
        while runs or active:
            while runs and len(active) < live:
                active.append(runs.popleft())
            run = active.popleft()
            out.write(dump_event(run.popleft()) + "\n")  # type: ignore[arg-type]
            n += 1
            if run:
                active.append(run)
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--live", type=int, default=64, help="runs interleaved at any moment")
    parser.add_argument("--calls", type=int, default=None, help="tool calls per run (long runs)")
    parser.add_argument("--growth", action="store_true", help="every verb's cost per event")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(GROWTH_SIZES))
    parser.add_argument("--check", action="store_true", help="with --growth: fail unless flat")
    args = parser.parse_args(argv)
    if args.growth:
        return growth(tuple(args.sizes), check=args.check)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.jsonl"
        print(f"writing {args.events:,} events ...", file=sys.stderr)
        lines = write_log(log, args.events, args.live, args.calls)
        size = log.stat().st_size
        rows = [(jobs, *_validate(log, jobs)) for jobs in ("1", "auto")]
    shape = "corpus runs" if args.calls is None else f"runs of {args.calls:,} tool calls"
    print(f"`agentfsm validate` on {shape}, one process and `--jobs auto` ({os.cpu_count()} cores)")
    print("| log | lines | --jobs | wall time | events/s | peak RSS: reader / a worker | exit |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- |")
    ok = True
    for jobs, elapsed, reader, worker, result in rows:
        ok = ok and result.returncode == 0
        workers = f"{worker / 1024:,.0f} MiB" if jobs != "1" else "-"
        print(
            f"| {size / 2**20:,.0f} MiB, {args.live} live runs | {lines:,} | {jobs} | "
            f"{elapsed:.1f} s | {lines / elapsed:,.0f} | {reader / 1024:,.0f} MiB / {workers} | "
            f"{result.returncode} |"
        )
        if result.returncode != 0:
            print(result.stdout[:500], result.stderr[:500], file=sys.stderr)
    return 0 if ok else 1


def _validate(log: Path, jobs: str) -> tuple[float, int, int, subprocess.CompletedProcess[str]]:
    """Wall seconds, the reader's and the largest worker's peak KiB, and the child."""
    start = time.perf_counter()
    result = subprocess.run(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-c", _CHILD, str(log), "--jobs", jobs],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    elapsed = time.perf_counter() - start
    reader, worker = map(int, result.stderr.strip().splitlines()[-1].split())
    return elapsed, reader, worker, result


GROWTH_SIZES = (10_000, 100_000, 200_000)
#: How much more the largest input may cost per event than the smallest (`--check`).
FLAT = 1.5

# The child times one verb in-process, after the imports, in CPU seconds (its own: the
# `dot` that `report` starts is a child's and not counted), its output thrown away.
_TIMED = """
import os, sys, time
from agentfsm.cli import main
sys.stdout = open(os.devnull, "w")
start = time.process_time()
code = main(sys.argv[1:])
print(time.process_time() - start, code, file=sys.stderr)
"""

#: A run of four events: started, one model call that answers, completed.
_SHORT_RUN = [
    {"type": "run.started", "objective": "answer"},
    {"type": "model.started"},
    {"type": "model.completed", "decision": "final", "output": "done",
     "usage": {"input_tokens": 100, "output_tokens": 10, "cost": 0.0001}},
    {"type": "run.completed"},
]  # fmt: skip


def many_runs(runs: int) -> list[list[str]]:
    """`runs` runs of four events each, as JSON lines (`run_000000` ...)."""
    template = []
    for sequence, fields in enumerate(_SHORT_RUN, start=1):
        event = parse_event(
            {"run_id": "r0", "sequence": sequence,
             "occurred_at": f"2026-09-01T10:00:0{sequence}+00:00", **fields}
        )  # fmt: skip
        template.append(dump_event(event))
    return [
        [line.replace('"run_id":"r0"', f'"run_id":"run_{i:06d}"', 1) for line in template]
        for i in range(runs)
    ]


def one_run(events: int) -> list[list[str]]:
    """One run of about `events` events (five a tool call)."""
    return [[dump_event(e) for e in long_run(max(1, (events - 5) // 5), "run_000000")]]


def _write_interleaved(path: Path, runs: list[list[str]], live: int = 64) -> int:
    """The runs' lines, `live` runs interleaved at a time; the number of lines."""
    pending = deque(deque(run) for run in runs)
    active: deque[deque[str]] = deque()
    n = 0
    with path.open("w", encoding="utf-8") as out:
        while pending or active:
            while pending and len(active) < live:
                active.append(pending.popleft())
            run = active.popleft()
            out.write(run.popleft() + "\n")
            n += 1
            if run:
                active.append(run)
    return n


def _stored(path: Path, runs: list[list[str]]) -> None:
    """A SQLite store holding `runs`, one append per run."""
    with SQLiteEventStore(path, synchronous="NORMAL") as store:
        for run in runs:
            events = [parse_event(line) for line in run]
            store.append(events[0].run_id, events, 0)


def _verbs(shape: str, log: Path, store: Path, last: str, out: Path) -> dict[str, list[str]]:
    """The commands timed on an input of `shape` (`runs` lists runs: one run is no input)."""
    verbs = {
        "validate": ["validate", str(log), "--quiet", "--jobs", "1"],
        "replay": ["replay", str(log), "--quiet", "--format", "json"],
        "inspect": ["inspect", str(log), "--quiet", "--run-id", last, "--format", "json"],
        "diagram --run": ["diagram", "--run", str(log), "--run-id", last],
        "report": ["report", str(log), "-o", str(out)],
        "export": ["export", "--store", str(store), "-o", str(out)],
        "runs": ["runs", "--store", str(store), "--format", "json"],
    }
    if shape != "runs":
        del verbs["runs"]
    return verbs


def _timed(argv: list[str]) -> float:
    result = subprocess.run(  # noqa: S603 - our own interpreter and script
        [sys.executable, "-c", _TIMED, *argv], capture_output=True, text=True, check=False
    )
    *_, last = result.stderr.strip().splitlines() or ["? ?"]
    seconds, code = last.split()
    if code != "0":
        raise SystemExit(f"`agentfsm {' '.join(argv)}` exited {code}: {result.stderr[-500:]}")
    return float(seconds)


def growth_rows(sizes: tuple[int, ...]) -> list[tuple[str, str, int, int, float]]:
    """(shape, verb, size, events, CPU seconds) for every shape, size and verb."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for shape, make in (("runs", many_runs), ("events", one_run)):
            for size in sizes:
                runs = make(size)
                log, store = Path(tmp) / f"{shape}-{size}.jsonl", Path(tmp) / f"{shape}-{size}.db"
                events = _write_interleaved(log, runs)
                _stored(store, runs)
                last = parse_event(runs[-1][0]).run_id
                print(f"{shape}: {size:,} ({events:,} events) ...", file=sys.stderr)
                for verb, argv in _verbs(shape, log, store, last, Path(tmp) / "out").items():
                    rows.append((shape, verb, size, events, _timed(argv)))
                log.unlink()
                store.unlink()
    return rows


def steep_verbs(rows: list[tuple[str, str, int, int, float]], limit: float = FLAT) -> list[str]:
    """The (shape, verb) pairs whose largest input costs over `limit`x the smallest's per
    event."""
    per: dict[tuple[str, str], list[float]] = {}
    for shape, verb, _, events, seconds in rows:
        per.setdefault((shape, verb), []).append(seconds / events)
    return [
        f"{verb} on {shape}: {costs[-1] / costs[0]:.2f}x"
        for (shape, verb), costs in per.items()
        if costs[-1] > limit * costs[0]
    ]


def growth(sizes: tuple[int, ...], *, check: bool) -> int:
    """Print every verb's CPU µs per event at each size; with `check`, fail unless flat."""
    rows = growth_rows(sizes)
    print("CPU µs per event of each verb as the input grows ('runs': that many runs of four "
          "events; 'events': one run of that many events)")  # fmt: skip
    print("| input | verb | " + " | ".join(f"{s:,}" for s in sizes) + " | largest / smallest |")
    print("| --- | --- | " + " | ".join("---:" for _ in sizes) + " | ---: |")
    per: dict[tuple[str, str], list[float]] = {}
    for shape, verb, _, events, seconds in rows:
        per.setdefault((shape, verb), []).append(seconds / events)
    for (shape, verb), costs in per.items():
        cells = " | ".join(f"{c * 1e6:,.2f}" for c in costs)
        print(f"| {shape} | {verb} | {cells} | {costs[-1] / costs[0]:.2f}x |")
    over = steep_verbs(rows)
    if check and over:
        print(f"cost per event is not flat (over {FLAT}x): {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
