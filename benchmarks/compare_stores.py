"""A store's append and load cost in two (or more) checkouts, measured alternately in one run.

    python benchmarks/compare_stores.py /path/to/old-checkout /path/to/this-checkout

For "before and after" figures of a change to the store's own code (`git worktree add
/tmp/before <commit>` makes the old checkout). Each round runs every checkout in a fresh
process, in turn, so a busy machine slows them alike; the figure is the median per checkout,
and the ratio to the first checkout beside it. What is timed is the CPU time of the process
that uses the store (`time.process_time`), so neither the disk nor the database server, nor
other processes on a busy machine, move the figures. Measured, logging off:

- append: one event per append, the handle's own last append as the head (the Runner's
  case), µs per append (the fastest of 15 slices of 100); on the memory store, SQLite (a
  temporary file, synchronous NORMAL, so the disk does not drown the CPU cost),
  PostgreSQL and the async PostgreSQL store;
- load: a 2,001-event run with a snapshot every 1,000 events, ms per load (the fastest of
  20), on the same.

A throwaway PostgreSQL server is started for the run (fsync off: the CPU cost is compared).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

_CHILD = r"""
import asyncio, json, logging, sys, tempfile, time, uuid
root, dsn = sys.argv[1], sys.argv[2]
sys.path.insert(0, root)
import structlog
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
import agentfsm
assert agentfsm.__file__.startswith(root), agentfsm.__file__
from agentfsm.stores import MemoryEventStore, SQLiteEventStore
from agentfsm.stores.postgres import AsyncPostgresEventStore, PostgresEventStore
from agentfsm.testing import scripted_run

SLICES, PER_SLICE, LOAD_TURNS, LOADS = 15, 100, 400, 20
out = {}

# Each figure is the client's CPU time (the server's and the disk's are not counted: they
# are what they were), the fastest of several slices: on a shared machine the fastest is
# the one least slowed by others, so it moves least from round to round.

def appends(name, append):
    run = "a-" + uuid.uuid4().hex
    events = scripted_run(run, SLICES * PER_SLICE // 5 + 1)[: SLICES * PER_SLICE]
    best = float("inf")
    for k in range(SLICES):
        t = time.process_time()
        for i in range(k * PER_SLICE, (k + 1) * PER_SLICE):
            yield append(run, [events[i]], i)
        best = min(best, time.process_time() - t)
    out[name + " append µs"] = best / PER_SLICE * 1e6

def loads(name, append, load):
    run = "l-" + uuid.uuid4().hex
    yield append(run, scripted_run(run, LOAD_TURNS), 0)
    best = float("inf")
    for _ in range(LOADS):
        t = time.process_time()
        yield load(run)
        best = min(best, time.process_time() - t)
    out[name + " load ms"] = best * 1e3

def sync(name, store):
    for steps in (appends(name, store.append), loads(name, store.append, store.load)):
        for _ in steps:
            pass

async def native(name, store):
    for steps in (appends(name, store.append), loads(name, store.append, store.load)):
        for pending in steps:
            await pending
    await store.close()

sync("memory", MemoryEventStore())
with tempfile.TemporaryDirectory() as tmp:
    store = SQLiteEventStore(tmp + "/runs.db", synchronous="NORMAL")
    sync("sqlite", store)
    store.close()
prefix = "b" + uuid.uuid4().hex[:8] + "_"
store = PostgresEventStore(dsn, table_prefix=prefix, migrate=True)
sync("postgres", store)
store.close()
async def main():
    store = await AsyncPostgresEventStore.connect(dsn, table_prefix=prefix)
    await native("async postgres", store)
asyncio.run(main())
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from agentfsm.testing.fixtures.postgres_server import postgres_server

    roots = [str(c.resolve()) for c in args.checkouts]
    found: dict[str, dict[str, list[float]]] = {r: {} for r in roots}
    with postgres_server(durable=False) as pg:
        for _ in range(args.rounds):
            for root in roots:
                done = subprocess.run(  # noqa: S603  (our own interpreter and script)
                    [sys.executable, "-c", _CHILD, root, pg.dsn],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                for name, value in json.loads(done.stdout.splitlines()[-1]).items():
                    found[root].setdefault(name, []).append(value)
    first = found[roots[0]]
    print(f"median of {args.rounds} alternating rounds; ratio to {roots[0]}")
    for name in first:
        cells = []
        for root in roots:
            median = statistics.median(found[root][name])
            ratio = median / statistics.median(first[name])
            cells.append(f"{median:9.2f} ({ratio:.2f}x)")
        print(f"{name:22} " + "  ".join(cells))


if __name__ == "__main__":
    main()
