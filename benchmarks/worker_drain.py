"""Draining an `agentfsm worker` with SIGTERM, timed on real processes and a real PostgreSQL.

A worker drives a run whose tools each take `--tool-delay` seconds; SIGTERM arrives during
the first call. Printed: the worker's start to its ready file, SIGTERM to the process's exit
(the call under way finishes, the run is handed back), and a second worker's readiness to
the run's end (no lease to wait out), beside the engine's `stalled_after` (what a SIGKILLed
worker's run waits on top of the recovery pass).

    python -m benchmarks.worker_drain [--tool-delay 1.5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from agentfsm.runtime import submit
from agentfsm.runtime.procrastinate import EngineSettings, Waker
from agentfsm.stores.postgres import PostgresEventStore
from agentfsm.testing.fixtures.postgres_server import postgres_server
from tests.runtime import _pq_app

ROOT = Path(__file__).resolve().parents[1]


def _url(dsn: str) -> str:
    info = conninfo_to_dict(dsn)
    user = info.get("user", "postgres")
    return f"postgresql://{user}@{info['host']}:{info['port']}/{info['dbname']}"


def _types(dsn: str) -> list[str]:
    with PostgresEventStore(dsn) as store:
        return [e.type for e in store.events("r1")]


def _wait(pred, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise SystemExit("timed out")
        time.sleep(0.01)


def one_round(admin: str, delay: float) -> tuple[float, float, float]:
    with _pq_app.fresh_database(admin) as dsn, tempfile.TemporaryDirectory() as tmp:
        url = _url(dsn)
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PQ_LEDGER": f"{tmp}/l.db",
            "PQ_TOOL_DELAY": str(delay),
        }
        subprocess.run(
            [sys.executable, "-m", "agentfsm", "setup", "--store", url],
            check=True,
            capture_output=True,
            cwd=ROOT,
        )
        ready = Path(tmp) / "ready"
        cmd = [
            sys.executable,
            "-m",
            "agentfsm",
            "worker",
            "--store",
            url,
            "--runner",
            "tests.runtime._pq_app:make_runner",
        ]
        started = time.monotonic()
        w1 = subprocess.Popen(
            [*cmd, "--ready-file", str(ready)], cwd=ROOT, env=env, stderr=subprocess.DEVNULL
        )
        _wait(ready.exists)
        to_ready = time.monotonic() - started
        with Waker().store(dsn) as store:
            submit(store, "r1", "plain")
        _wait(lambda: "tool.started" in _types(dsn))
        sent = time.monotonic()
        w1.send_signal(signal.SIGTERM)
        assert w1.wait(60) == 0
        to_exit = time.monotonic() - sent
        ready2 = Path(tmp) / "ready2"
        w2 = subprocess.Popen(
            [*cmd, "--ready-file", str(ready2)],
            cwd=ROOT,
            env={**env, "PQ_TOOL_DELAY": "0"},
            stderr=subprocess.DEVNULL,
        )
        _wait(ready2.exists)
        began = time.monotonic()
        _wait(lambda: "run.completed" in _types(dsn))
        to_done = time.monotonic() - began
        w2.send_signal(signal.SIGTERM)
        w2.wait(60)
        return to_ready, to_exit, to_done


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tool-delay", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with postgres_server() as server:
        rounds = [one_round(server.dsn, args.tool_delay) for _ in range(args.rounds)]
    for name, values in zip(
        ("start → ready", "SIGTERM → exit 0", "second worker ready → run completed"),
        zip(*rounds, strict=True),
        strict=True,
    ):
        print(
            f"{name:38} median {statistics.median(values):.2f} s  "
            f"(min {min(values):.2f}, max {max(values):.2f})"
        )
    print(
        f"tool call under way at SIGTERM: {args.tool_delay:.2f} s; "
        f"stalled_after (a SIGKILLed worker's wait): {EngineSettings().stalled_after:.1f} s"
    )


if __name__ == "__main__":
    main()
