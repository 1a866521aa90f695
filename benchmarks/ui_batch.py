"""Issue 25's attack on the UI, measured: one decision proposes N calls that each need approval.

    .venv/bin/python benchmarks/ui_batch.py [--calls 100,300,1000,3000] [--timeout 120]

For each N, the run's log (`bench_ui.batch_run`) goes into a SQLite store (in /dev/shm when
there is one), and a fresh server (nothing cached) answers `/approvals` and `/run?id=batch`;
`render_report` writes the review file of the run's log. Each measurement runs in its own
process, under `--timeout` seconds, so one that never answers (as the inbox once did at
3,000 calls) is reported as such and its memory is given back; the peak RSS is that
process's.
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

WHAT = ("approvals", "run", "report")


def measure(calls: int, what: str) -> str:
    """One line: the bytes and milliseconds of `what` for a run waiting on `calls` calls."""
    from starlette.testclient import TestClient

    from agentfsm import SQLiteEventStore
    from agentfsm.events import dump_event
    from agentfsm.reducers.reduce import Reducer
    from agentfsm.stores.base import StoreOptions
    from agentfsm.ui import Source, UIConfig, create_app, render_report
    from benchmarks.bench_ui import batch_run

    shm = Path("/dev/shm")  # noqa: S108 - a private TemporaryDirectory is made inside it
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        path = Path(tmp) / "runs.db"
        events = batch_run("batch", calls)
        with SQLiteEventStore(path) as store:
            for first in range(0, len(events), 1000):
                store.append("batch", events[first : first + 1000], first)
        lines = [dump_event(e) for e in events]
        start = time.perf_counter()
        if what == "report":
            size = len(render_report(log=lines).encode())
        else:
            source = Source(
                lambda t: SQLiteEventStore(path, options=StoreOptions(reducer=Reducer(t)))
            )
            app = create_app(source, UIConfig(token="x" * 20, allowed_hosts=("testserver",)))
            url = "/approvals" if what == "approvals" else "/run?id=batch"
            start = time.perf_counter()
            answer = TestClient(app).get(url)
            if answer.status_code != 200:
                raise SystemExit(f"{url} answered {answer.status_code}")
            size = len(answer.content)
        ms = (time.perf_counter() - start) * 1000
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return f"| {calls:,} | {what} | {size / 1e6:.2f} | {ms:,.0f} | {peak:,.0f} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", default="100,300,1000,3000")
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--one", nargs=2, metavar=("CALLS", "WHAT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(measure(int(args.one[0]), args.one[1]), flush=True)
        return 0
    print("| calls | page | MB | ms | peak RSS MiB |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for what in WHAT:
        for calls in (int(n) for n in args.calls.split(",")):
            try:
                done = subprocess.run(  # noqa: S603 - this interpreter, this file
                    [sys.executable, __file__, "--one", str(calls), what],
                    capture_output=True, text=True, timeout=args.timeout, check=False,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                print(f"| {calls:,} | {what} | no answer in {args.timeout:.0f} s | | |")
                continue
            print(done.stdout.strip() or f"| {calls:,} | {what} | failed: {done.stderr[-300:]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
