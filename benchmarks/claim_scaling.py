"""What a Worker's claim costs as the backlog grows: claim time and three workers' drain rate
with 0 / 1,000 / 5,000 / 20,000 / 50,000 runnable runs waiting, beside issue 32's "before".

    .venv/bin/python benchmarks/claim_scaling.py [--backlogs 0,1000,5000,20000,50000]
        [--drain 300] [--claims 200]

One SQLite file (synchronous NORMAL, on /dev/shm when there is one) grows to each backlog in
turn (runs submitted, never driven). At each size:

- claim ms: the median of `--claims` claims (each released at once, so the next claim reads
  the same queue), in this process;
- drain runs/s: `--drain` more runs are submitted, then three Worker processes (fork) drive
  that many to their end (one model turn each, an instant fake that answers). Claims are
  first come, first served, so they drive the oldest runs of the backlog; the backlog stays
  the same size, which is what is measured: runs driven per second with that many waiting.

Target (issue 32): drain at 50,000 waiting within 1.3x of the empty queue.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog

from agentfsm import Agent, Decision, Runner, SQLiteEventStore
from agentfsm.runtime import Worker, submit
from agentfsm.stores.leases import SQLiteLeases

#: Issue 32's figures before the change: claim ms, and three workers' drain rate.
BEFORE_CLAIM_MS = {1000: 0.55, 5000: 3.7, 20000: 7.9, 50000: 35.0}
BEFORE_DRAIN = {0: 160.0, 20000: 62.0}
WORKERS = 3


def _agent() -> Agent:
    return Agent("bench", lambda ctx: Decision.answer("done"), [])


def _work(path: str, runs: int, name: str, done: multiprocessing.Queue[int]) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    store = SQLiteEventStore(path, synchronous="NORMAL")
    leases = SQLiteLeases(path, synchronous="NORMAL")
    worker = Worker(Runner(store, _agent()), leases, worker_id=name)
    done.put(len(worker.drain(max_runs=runs)))
    leases.close()
    store.close()


def drain_rate(path: str, runs: int) -> float:
    """Runs per second three Worker processes drive, `runs` in all."""
    ctx = multiprocessing.get_context("fork")
    done: multiprocessing.Queue[int] = ctx.Queue()
    shares = [runs // WORKERS + (1 if i < runs % WORKERS else 0) for i in range(WORKERS)]
    procs = [
        ctx.Process(target=_work, args=(path, share, f"w{i}", done))
        for i, share in enumerate(shares)
    ]
    start = time.perf_counter()
    for p in procs:
        p.start()
    driven = sum(done.get(timeout=600) for _ in procs)
    took = time.perf_counter() - start
    for p in procs:
        p.join()
    return driven / took


def claim_ms(path: str, claims: int) -> float:
    leases = SQLiteLeases(path, synchronous="NORMAL")
    times = []
    for _ in range(claims):
        start = time.perf_counter()
        run_id = leases.claim("bench", 30)
        times.append(time.perf_counter() - start)
        assert run_id is not None
        leases.release(run_id, "bench")
    leases.close()
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backlogs", default="0,1000,5000,20000,50000")
    parser.add_argument("--drain", type=int, default=300, help="runs drained per size")
    parser.add_argument("--claims", type=int, default=200)
    args = parser.parse_args(argv)
    backlogs = sorted(int(b) for b in args.backlogs.split(","))
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    shm = Path("/dev/shm")  # noqa: S108 - a private TemporaryDirectory is made inside it
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as tmp:
        path = str(Path(tmp) / "queue.db")
        store = SQLiteEventStore(path, synchronous="NORMAL")
        waiting = 0
        serial = 0
        rows: list[tuple[int, float, float]] = []
        for backlog in backlogs:
            started = time.perf_counter()
            while waiting < backlog:
                submit(store, f"q-{serial:07d}", "wait")
                serial += 1
                waiting += 1
            built = time.perf_counter() - started
            ms = claim_ms(path, args.claims) if backlog else float("nan")
            for _ in range(args.drain):
                submit(store, f"q-{serial:07d}", "drain")
                serial += 1
            rate = drain_rate(path, args.drain)
            rows.append((backlog, ms, rate))
            print(f"  {backlog:,} runnable: built in {built:.0f} s", file=sys.stderr)
        store.close()
    empty = next((rate for backlog, _, rate in rows if backlog == 0), rows[0][2])
    print(f"| runnable waiting | claim ms | before | drain runs/s ({WORKERS} workers) | before "
          "| drain vs empty |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for backlog, ms, rate in rows:
        before_ms = BEFORE_CLAIM_MS.get(backlog)
        before_rate = BEFORE_DRAIN.get(backlog)
        print(
            f"| {backlog:,} | {'-' if backlog == 0 else f'{ms:.2f}'} | "
            f"{'-' if before_ms is None else f'{before_ms:.2f}'} | {rate:.0f} | "
            f"{'-' if before_rate is None else f'{before_rate:.0f}'} | {empty / rate:.2f}x |"
        )
    print("target: drain at 50,000 waiting within 1.3x of the empty queue")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
