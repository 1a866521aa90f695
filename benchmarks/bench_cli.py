"""`agentfsm validate` on a large log: events/s and peak memory, in a child process.

Builds a seeded JSON Lines file of about 1,000,000 events in which 64 runs are live at any
moment (lines of different runs interleaved, as a shared log would have them), then runs
the real console script on it and reads the child's peak resident memory from the kernel.

The runs are the benchmark corpus (about twenty events each) by default; `--calls N` makes
them long-horizon runs of N tool calls each instead (`benchmarks/growth.py`'s shape, five
events a call), where a run's ledger holds thousands of actions while it is live.
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

from agentfsm import Event, dump_event, parse_event
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
    args = parser.parse_args(argv)
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


if __name__ == "__main__":
    raise SystemExit(main())
