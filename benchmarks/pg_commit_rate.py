"""One PostgreSQL's commit rate here with fsync on, and what it means in turns per second.

    .venv/bin/python benchmarks/pg_commit_rate.py [--seconds 3]

A throwaway server with PostgreSQL's default durability (fsync and synchronous_commit on):
1, 4 and 16 connections (threads) each commit one-row INSERTs in autocommit for
`--seconds`; printed: commits/s, and the turns/s one database takes at the Runner's two
commits a turn (the persist-before-act floor: the decision with its requested calls, then
the calls' outcomes), before Procrastinate's own commits per job.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm.testing.fixtures.postgres_server import postgres_server

COMMITS_PER_TURN = 2


def rate(dsn: str, connections: int, seconds: float) -> float:
    counts = [0] * connections
    stop = time.monotonic() + seconds

    def work(i: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < stop:
                conn.execute("INSERT INTO commits (worker) VALUES (%s)", (i,))
                counts[i] += 1

    threads = [threading.Thread(target=work, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    with postgres_server(durable=True) as server:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE commits (id bigserial PRIMARY KEY, worker int)")
            fsync = conn.execute("SHOW fsync").fetchone()
            sync = conn.execute("SHOW synchronous_commit").fetchone()
        print(f"fsync={fsync[0] if fsync else '?'} synchronous_commit={sync[0] if sync else '?'}")
        print("| connections | commits/s | turns/s at 2 commits a turn |")
        print("| ---: | ---: | ---: |")
        for connections in (1, 4, 16):
            r = rate(server.dsn, connections, args.seconds)
            print(f"| {connections} | {r:,.0f} | {r / COMMITS_PER_TURN:,.0f} |")


if __name__ == "__main__":
    main()
