"""How the cost of an event grows with the run it belongs to: `make bench` prints it.

A long-horizon agent makes thousands of tool calls in one run. Each call here is the same
five events (`model.started`, `model.completed` proposing one call, `tool.requested`,
`tool.started`, `tool.completed`), so a run of N calls is 5N + 2 events and every event is
alike: whatever grows from one row of the table to the next is the cost of the run's
length, not of different work. Three costs are measured per event, CPU time:

- reduce: folding the whole log from the start;
- append: writing the log to an SQLite store (synchronous NORMAL, one event per commit,
  snapshots at the store's default cadence), through `Writer`-free `store.append`;
- load: reading the run back, from the latest snapshot and without any.

Flat means the 20,000-call row costs about what the 100-call row costs (the 10-call row
carries a run's fixed costs over few events). `--check` exits non-zero when a cost of the
largest run exceeds 1.5x the 100-call run's, per event.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm import Event, LogBuilder
from agentfsm.reducers import DEFAULT_REDUCER
from agentfsm.stores import SQLiteEventStore, StoreOptions
from benchmarks.raw import raw_sqlite, rows_of, sqlite_raw_conn

__all__ = ["long_run", "main"]

SIZES = (10, 100, 1_000, 20_000)
NO_SNAPSHOTS = StoreOptions(snapshot_every=None)
REFERENCE = 100  # the run the largest is compared with


def long_run(calls: int, run_id: str = "long") -> list[Event]:
    """A legal run of `calls` tool calls, five events each, then a final answer."""
    log = LogBuilder(run_id)
    log.add("run.started", objective="a long horizon", agent="main")
    for i in range(calls):
        aid = f"call_{i}"
        log.add("model.started")
        log.add(
            "model.completed",
            decision="tool_calls",
            usage={"input_tokens": 300, "output_tokens": 20, "cost": 0.0001},
            tool_calls=[{"action_id": aid, "tool": "fetch", "arguments": {"page": i}}],
        )
        log.add("tool.requested", action_id=aid, tool="fetch", arguments={"page": i})
        log.add("tool.started", action_id=aid)
        log.add("tool.completed", action_id=aid, result={"n": i % 7})
    log.add("model.started")
    log.add("model.completed", decision="final", output="done")
    log.add("run.completed")
    return log.events


def _cpu(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.process_time()
    fn()
    return time.process_time() - start


def reduce_cost(events: list[Event]) -> float:
    """Seconds of CPU to fold `events` from the start."""
    return _cpu(lambda: DEFAULT_REDUCER.replay(events))


def store_costs(events: list[Event], directory: Path) -> tuple[float, float, float, float]:
    """Seconds of CPU to append `events` one per commit, to insert the same rows with the
    raw driver, to load the run from its latest snapshot, and to load it with no snapshot."""
    rows = rows_of(events)
    with closing(sqlite_raw_conn(directory / f"raw-{len(events)}.db", "NORMAL")) as conn:
        raw = _cpu(lambda: raw_sqlite(conn, rows, 1))
    path = directory / f"growth-{len(events)}.db"

    def append_each(store: SQLiteEventStore) -> None:
        for e in events:  # keeping every returned record alive would measure the GC
            store.append(e.run_id, [e], e.sequence - 1)

    with SQLiteEventStore(path, synchronous="NORMAL") as store:
        append = _cpu(lambda: append_each(store))
    with SQLiteEventStore(path, synchronous="NORMAL") as store:  # a cold handle: no cache
        load = _cpu(lambda: store.load(events[0].run_id))
    bare = directory / f"growth-bare-{len(events)}.db"
    with SQLiteEventStore(bare, options=NO_SNAPSHOTS, synchronous="NORMAL") as s:
        s.append(events[0].run_id, events, 0)
        replay = _cpu(lambda: s.load(events[0].run_id))
    return append, raw, load, replay


def table(sizes: tuple[int, ...], rounds: int, stores: bool) -> list[dict[str, float]]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for calls in sizes:
            events = long_run(calls)
            n = len(events)
            row: dict[str, float] = {"calls": calls, "events": n}
            row["reduce"] = statistics.median(reduce_cost(events) for _ in range(rounds)) / n
            if stores:
                append, raw, load, replay = store_costs(events, Path(tmp))
                row.update(append=append / n, raw=raw / n, load=load / n, replay=replay / n)
            rows.append(row)
    return rows


def report(rows: list[dict[str, float]]) -> str:
    keys = [k for k in ("reduce", "append", "raw", "load", "replay") if k in rows[0]]
    head = f"{'tool calls':>10} {'events':>8} " + " ".join(f"{k + ' µs':>11}" for k in keys)
    lines = [
        "cost per event as the run grows (CPU µs per event; 'raw': the same rows inserted "
        "by sqlite3; 'load' from the latest snapshot, 'replay' with none)",
        head,
    ]
    for row in rows:
        cells = " ".join(f"{row[k] * 1e6:>11.2f}" for k in keys)
        lines.append(f"{int(row['calls']):>10,} {int(row['events']):>8,} {cells}")
    first, last = _reference(rows), rows[-1]
    ratios = ", ".join(f"{k} {last[k] / first[k]:.2f}x" for k in keys)
    lines.append(f"largest run / the {int(first['calls']):,}-call run, per event: {ratios}")
    return "\n".join(lines)


def _reference(rows: list[dict[str, float]]) -> dict[str, float]:
    return next((r for r in rows if r["calls"] == REFERENCE), rows[0])


def steep(rows: list[dict[str, float]], limit: float = 1.5) -> list[str]:
    """The costs of the largest run over `limit` times the reference run's, per event."""
    first, last = _reference(rows), rows[-1]
    return [
        f"{k}: {last[k] / first[k]:.2f}x"
        for k in ("reduce", "append", "load", "replay")
        if k in last and last[k] > limit * first[k]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-stores", action="store_true", help="reduce only")
    parser.add_argument("--check", action="store_true", help="fail when a cost is not flat")
    args = parser.parse_args(argv)
    rows = table(tuple(args.sizes), args.rounds, not args.no_stores)
    print(report(rows))
    over = steep(rows)
    if args.check and over:
        print(f"cost per event is not flat (over 1.5x): {', '.join(over)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
