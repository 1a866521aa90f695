"""What the run's lease costs a drive: the Runner's turn with and without it, in one process.

    python benchmarks/lease_costs.py [--rounds 15] [--runs 40]

Every drive holds its run's lease (`EventStore.hold` once, renewed by the heartbeat thread
on its own clock, released at the end) and its writer checks the lease before each append.
Here the same Runner turn (one model call asking for one tool call, both instant fakes, 20
turns a run, logging off) is measured on a store that keeps leases and on the same store
made to keep none (`_lease_rows` answering None: the Runner then drives unleased), rounds
alternating in one process, in CPU time; and, alone, what a drive's lease costs (take, keep,
release) and what an append's check costs. Memory and SQLite (`synchronous="NORMAL"`, in a
temporary file).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
import timeit
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog

from agentfsm.reducers import DEFAULT_REDUCER
from agentfsm.runtime import Agent, Decision, ProposedCall, Runner, Tool
from agentfsm.runtime._writer import Writer
from agentfsm.stores import EventStore, MemoryEventStore, SQLiteEventStore

TURNS = 20


def _agent() -> Agent:
    asks = [Decision.call_tools(ProposedCall("lookup", {"n": i})) for i in range(TURNS)]
    final = Decision.answer("done")
    return Agent(
        "bench",
        lambda ctx: final if ctx.turn > TURNS - 1 else asks[ctx.turn - 1],
        [Tool("lookup", lambda ctx: "ok", side_effects=False)],
    )


def _unleased(store: EventStore) -> EventStore:
    store._lease_rows = lambda: None  # type: ignore[method-assign]
    return store


def turns(make: Callable[[], EventStore], rounds: int, runs: int) -> tuple[float, float]:
    """Median CPU µs per turn of a Runner on `make()`'s store, leased and not."""
    leased, unleased = Runner(make(), _agent()), Runner(_unleased(make()), _agent())
    for runner in (leased, unleased):  # warm up
        runner.run("warm-up")
    figures: dict[Runner, list[float]] = {leased: [], unleased: []}
    for r in range(rounds):
        order = (leased, unleased) if r % 2 == 0 else (unleased, leased)
        for runner in order:
            start = time.process_time()
            for i in range(runs):
                runner.run(f"r{r}-{i}")
            figures[runner].append((time.process_time() - start) / runs / TURNS * 1e6)
    return statistics.median(figures[leased]), statistics.median(figures[unleased])


def per_drive(store: EventStore, n: int) -> float:
    """CPU µs to take a run's lease, keep it, and release it (what a drive adds once)."""
    start = time.process_time()
    for i in range(n):
        lease = store.hold(f"d{i}")
        with lease.kept():
            pass
        lease.release()
    return (time.process_time() - start) / n * 1e6


def per_append(n: int) -> float:
    """µs of the writer's check of its lease before an append."""
    store = MemoryEventStore()
    writer = Writer(
        store,
        DEFAULT_REDUCER.initial("r"),
        reducer=DEFAULT_REDUCER,
        clock=lambda: datetime.now(UTC),
    )
    writer.lease = store.hold("r")
    return timeit.timeit(writer.check_lease, number=n) / n * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15, help="alternations")
    parser.add_argument("--runs", type=int, default=40, help="runs of 20 turns per round")
    args = parser.parse_args(argv)
    folder = tempfile.mkdtemp(prefix="lease-costs-")
    paths = iter(range(1_000))

    def sqlite() -> EventStore:
        return SQLiteEventStore(os.path.join(folder, f"{next(paths)}.db"), synchronous="NORMAL")

    print("| store | µs/turn, leased | µs/turn, unleased | ratio | µs per drive's lease |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, make in (("memory", MemoryEventStore), ("SQLite (NORMAL)", sqlite)):
        leased, unleased = turns(make, args.rounds, args.runs)
        drive = per_drive(make(), max(args.runs * 10, 10))
        print(
            f"| {name} | {leased:.1f} | {unleased:.1f} | {leased / unleased:.3f}x | {drive:.1f} |"
        )
    print(f"\nthe writer's check of its lease, per append: {per_append(100_000):.2f} µs")
    return 0


if __name__ == "__main__":
    # Logging off for the measurement (here, not in `main`: a test calls it in-process).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    raise SystemExit(main())
