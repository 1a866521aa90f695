"""Where a store's append goes, per event, next to the raw insert of the same rows.

    python benchmarks/store_costs.py [--calls 400] [--rounds 3]

One run of `growth.long_run(calls)` (five events a tool call) is appended one event per
commit to SQLite with `synchronous=NORMAL` (no fsync: CPU only), three ways, interleaved
round by round, median reported, CPU µs per event:

- ours: `SQLiteEventStore.append`, all of it;
- ours, handed the writer's fold (`append(folded=)`, what the Runner's appends pay: the
  store judges each event but does not fold it again);
- ours without the runs row: the same, but the transaction writes only the events (the
  runs row is what listing by status reads, and what the optimistic check moves);
- raw: `sqlite3` inserting the very rows ours writes (`benchmarks/raw.py`), prepared ahead.

Then the Python pieces of an append, each alone over the same events: the fold, the
stored line (`dump_event`), the canonical JSON the hash chain covers, and the link.
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

from agentfsm.events import dump_event
from agentfsm.events._canonical import canonical_text
from agentfsm.reducers import DEFAULT_REDUCER, Reducer
from agentfsm.stores import GENESIS_HASH, Folded, SQLiteEventStore, chain_hash
from agentfsm.stores._append import PreparedAppend
from benchmarks.growth import long_run
from benchmarks.raw import raw_sqlite, rows_of, sqlite_raw_conn


class WithoutRunsRow(SQLiteEventStore):
    """Our store, its transaction stripped of the runs row (for measuring it only)."""

    def _write(self, prepared: PreparedAppend) -> None:
        c = self._conn
        c.execute("BEGIN IMMEDIATE")
        if prepared.expected_version == 0:
            info = prepared.info
            key = self.options.integrity.record
            c.execute(self._sql_new_run, (prepared.run_id, info.status, info.version, None, key))
        c.executemany(
            self._sql_insert_event,
            [(prepared.run_id, r.sequence, r.type, r.data, r.hash) for r in prepared.rows],
        )
        c.execute("COMMIT")


def _cpu(fn: Callable[[], Any], n: int) -> float:
    gc.collect()
    start = time.process_time()
    fn()
    return (time.process_time() - start) / n * 1e6


def _appends(store: SQLiteEventStore, events: list[Any]) -> Callable[[], None]:
    def run() -> None:
        for e in events:
            store.append(e.run_id, [e], e.sequence - 1)

    return run


def _handed_appends(store: SQLiteEventStore, events: list[Any]) -> Callable[[], None]:
    """Appends handed their writer's fold, made ahead (as the Runner's writer makes it)."""
    by = Reducer(store.reducer.table)
    records = [by.initial(events[0].run_id)]
    for e in events:
        records.append(by.reduce(records[-1], e))

    def run() -> None:
        head = store.append(events[0].run_id, events[:1], 0)
        for i, e in enumerate(events[1:], start=1):
            fold = Folded(by, head, (e,), (records[i + 1],))
            head = store.append(e.run_id, [e], e.sequence - 1, folded=fold)

    return run


def measure(calls: int, rounds: int) -> dict[str, float]:
    events = long_run(calls)
    n = len(events)
    rows = rows_of(events)
    figures: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(rounds):
            for name, cls in (("ours", SQLiteEventStore), ("without runs row", WithoutRunsRow)):
                with cls(Path(tmp) / f"{name}-{r}.db", synchronous="NORMAL") as store:
                    figures.setdefault(name, []).append(_cpu(_appends(store, events), n))
            with SQLiteEventStore(Path(tmp) / f"handed-{r}.db", synchronous="NORMAL") as store:
                handed = _handed_appends(store, events)
                figures.setdefault("ours, handed the writer's fold", []).append(_cpu(handed, n))
            with closing(sqlite_raw_conn(Path(tmp) / f"raw-{r}.db", "NORMAL")) as conn:
                figures.setdefault("raw", []).append(_cpu(lambda: raw_sqlite(conn, rows, 1), n))

    def fold() -> None:
        record = DEFAULT_REDUCER.initial(events[0].run_id)
        for e in events:
            record = DEFAULT_REDUCER.reduce(record, e)

    def link() -> None:
        previous = GENESIS_HASH
        for text in texts:
            previous = chain_hash(previous, text)

    lines = [dump_event(e) for e in events]
    texts = [canonical_text(line) for line in lines]
    parts = {
        "the fold (reduce)": fold,
        "the stored line (dump_event)": lambda: [dump_event(e) for e in events],
        "the hashed canonical JSON (from the line)": lambda: [
            canonical_text(line) for line in lines
        ],
        "the chain link (sha256)": link,
    }
    out = {name: statistics.median(v) for name, v in figures.items()}
    for name, fn in parts.items():
        out[name] = statistics.median(_cpu(fn, n) for _ in range(rounds))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    got = measure(args.calls, args.rounds)
    raw = got["raw"]
    print(f"append, one event per commit, SQLite NORMAL ({args.calls} tool calls, CPU µs/event)")
    print("| | µs per event | x raw |")
    print("| --- | ---: | ---: |")
    for name, value in got.items():
        print(f"| {name} | {value:.2f} | {value / raw:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
