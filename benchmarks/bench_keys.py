"""What a store's key record and an external anchor cost, and `verify` on a large store.

    python benchmarks/bench_keys.py [--rounds 5] [--runs 100000]

Every figure is a median over rounds that interleave the contenders.

- The key record check: every append's runs-row statement moves the row only while the
  store's key record is the handle's (a subquery on the meta table). Measured as that
  statement alone, with and without the subquery, one committed transaction each (SQLite,
  synchronous=NORMAL: CPU only).
- The anchor: one event per commit to a SQLite store (synchronous FULL and NORMAL), without
  an anchor and with a `FileAnchor` (FULL and NORMAL); wall µs per commit, since an anchor
  at FULL is one more fsync. Then a `FileAnchor` put alone, into a file that holds 10 runs
  and one that holds `--runs`: a put is a keyed upsert, so it must not grow with the file.
- `agentfsm verify` of a store of `--runs` runs (one tool turn each), in a process of its
  own: wall seconds and peak RSS, next to the same for a store of a tenth as many runs
  (memory must not grow with the number of runs: they are listed a page at a time).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm.stores import SQLiteEventStore, StoreOptions
from agentfsm.stores.anchor import AnchoredHead, FileAnchor
from agentfsm.testing import scripted_run

COMMITS = 300


def key_check(rounds: int, n: int = 20_000) -> dict[str, float]:
    """CPU µs of the runs-row UPDATE in its own transaction, without and with the check."""

    def once(with_key: bool) -> float:
        with tempfile.TemporaryDirectory() as d:
            c = sqlite3.connect(Path(d) / "x.db", isolation_level=None)
            c.execute("PRAGMA journal_mode=WAL")
            c.execute("PRAGMA synchronous=NORMAL")
            c.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
            c.execute(
                "CREATE TABLE runs (run_id TEXT PRIMARY KEY, status TEXT, version INTEGER, "
                "updated_at TEXT) WITHOUT ROWID"
            )
            c.execute("INSERT INTO meta VALUES ('integrity', 'unkeyed')")
            c.execute("INSERT INTO runs VALUES ('r1', 'running', 0, 't')")
            check = " AND (SELECT value FROM meta WHERE key = 'integrity') = ?"
            sql = "UPDATE runs SET version = ?, updated_at = ? WHERE run_id = ? AND version = ?"
            sql += check if with_key else ""
            extra = ("unkeyed",) if with_key else ()
            start = time.process_time()
            for v in range(n):
                c.execute("BEGIN IMMEDIATE")
                c.execute(sql, (v + 1, "t", "r1", v, *extra))
                c.execute("COMMIT")
            spent = time.process_time() - start
            c.close()
        return spent / n * 1e6

    got: dict[str, list[float]] = {"without the check": [], "with the check": []}
    for _ in range(rounds):
        got["without the check"].append(once(False))
        got["with the check"].append(once(True))
    return {name: statistics.median(values) for name, values in got.items()}


def _commits(synchronous: str, anchor: str | None) -> float:
    """Wall µs per commit of one event, a run of `COMMITS` events (after run.started)."""
    with tempfile.TemporaryDirectory() as d:
        kept = FileAnchor(Path(d) / "anchor.db", synchronous=anchor) if anchor else None
        options = StoreOptions(anchor=kept, snapshot_every=None)
        events = scripted_run("r1", COMMITS // 5 + 1)[: COMMITS + 1]
        store = SQLiteEventStore(Path(d) / "runs.db", options=options, synchronous=synchronous)
        store.append("r1", events[:1], 0)
        start = time.perf_counter()
        for event in events[1:]:
            store.append("r1", [event], event.sequence - 1)
        spent = time.perf_counter() - start
        store.close()
        if kept is not None:
            kept.close()
    return spent / (len(events) - 1) * 1e6


def anchor_commits(rounds: int) -> dict[tuple[str, str], float]:
    """Wall µs per commit, by (store synchronous, anchor)."""
    contenders = [
        (store, anchor) for store in ("FULL", "NORMAL") for anchor in ("none", "NORMAL", "FULL")
    ]
    got: dict[tuple[str, str], list[float]] = {c: [] for c in contenders}
    for _ in range(rounds):
        for store, anchor in contenders:
            got[store, anchor].append(_commits(store, None if anchor == "none" else anchor))
    return {c: statistics.median(v) for c, v in got.items()}


def anchor_growth(rounds: int, runs: int, puts: int = 2000) -> dict[int, float]:
    """Wall µs per `FileAnchor.put` of one head (synchronous=NORMAL), into a file that
    already holds 10 runs, and one that holds `runs`."""
    with tempfile.TemporaryDirectory() as d:
        anchors: dict[int, FileAnchor] = {}
        for size in (10, runs):
            anchor = FileAnchor(Path(d) / f"{size}.db", synchronous="NORMAL")
            for start in range(0, size, 5000):
                anchor.put(
                    [
                        AnchoredHead(f"r{i:07d}", 6, "ab" * 32, "unkeyed")
                        for i in range(start, min(size, start + 5000))
                    ]
                )
            anchors[size] = anchor
        got: dict[int, list[float]] = {size: [] for size in anchors}
        for r in range(rounds):
            for size, anchor in anchors.items():
                start = time.perf_counter()
                for i in range(puts):
                    run = f"r{(i * 7919) % size:07d}"
                    anchor.put([AnchoredHead(run, 7 + r * puts + i, "cd" * 32, "unkeyed")])
                got[size].append((time.perf_counter() - start) / puts * 1e6)
        for anchor in anchors.values():
            anchor.close()
    return {size: statistics.median(v) for size, v in got.items()}


def _store_of(path: Path, runs: int) -> None:
    with SQLiteEventStore(path, synchronous="NORMAL") as store:
        for i in range(runs):
            store.append(f"r{i:07d}", scripted_run(f"r{i:07d}", 1), 0)


_VERIFY = """
import resource, sys, time
from agentfsm.cli import main
start = time.perf_counter()
code = main(["verify", "--store", sys.argv[1]])
spent = time.perf_counter() - start
print(code, spent, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
"""


def verify_large(runs: int) -> dict[int, tuple[float, float]]:
    """(wall s, peak RSS MiB) of `agentfsm verify` on a store of `runs`, and of a tenth."""
    got: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as d:
        for size in (runs // 10, runs):
            path = Path(d) / f"{size}.db"
            _store_of(path, size)
            done = subprocess.run(  # noqa: S603 - our own interpreter and script
                [sys.executable, "-c", _VERIFY, str(path)],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
            )
            code, spent, rss = done.stderr.split()[-3:]
            assert code == "0", done.stdout + done.stderr
            got[size] = (float(spent), int(rss) / 1024)
    return got


def _table(title: str, head: str, rows: list[str]) -> None:
    print(f"\n{title}\n{head}\n{'|---' * (head.count('|') - 1)}|")
    for row in rows:
        print(row)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=100_000)
    args = parser.parse_args(argv)
    checks = key_check(args.rounds)
    _table(
        "Key record check (SQLite NORMAL, CPU µs per committed runs-row UPDATE)",
        "| | µs |",
        [f"| {name} | {value:.2f} |" for name, value in checks.items()],
    )
    commits = anchor_commits(args.rounds)
    rows: list[str] = []
    for store in ("FULL", "NORMAL"):
        base = commits[store, "none"]
        for anchor in ("none", "NORMAL", "FULL"):
            value = commits[store, anchor]
            rows.append(f"| {store} | {anchor} | {value:,.0f} | {value / base:.2f}x |")
    _table(
        f"Anchor per commit (one event per commit, {COMMITS} commits, wall µs per commit)",
        "| store synchronous | FileAnchor | µs per commit | x no anchor |",
        rows,
    )
    growth = anchor_growth(args.rounds, args.runs)
    _table(
        "FileAnchor.put of one head (synchronous=NORMAL, wall µs)",
        "| runs in the file | µs per put |",
        [f"| {size:,} | {value:.1f} |" for size, value in growth.items()],
    )
    large = verify_large(args.runs)
    _table(
        "agentfsm verify (runs of 6 events, SQLite)",
        "| runs | wall s | peak RSS MiB |",
        [f"| {size:,} | {s:.1f} | {rss:.0f} |" for size, (s, rss) in large.items()],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
