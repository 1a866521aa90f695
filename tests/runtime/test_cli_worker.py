"""`agentfsm setup` and `agentfsm worker` as an operator runs them: real processes, real
signals, a real PostgreSQL.

- The worker refuses a database without the engine's schema, naming `agentfsm setup`.
- Once set up, it logs JSON lines on stderr, says it is ready (a log line and the ready
  file), drives runs to their end, and on SIGTERM in the middle of a run's tool call lets
  the call finish, hands the run back (queued again, its lease released) and exits 0; a
  second worker finishes the run at once, the ticket opened once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from agentfsm.runtime import submit
from agentfsm.stores.postgres import PostgresEventStore
from tests.runtime.helpers import DurableLedger

ROOT = Path(__file__).resolve().parents[2]


def url_of(dsn: str) -> str:
    """The `postgresql://` URL the command line takes for a libpq DSN."""
    info = conninfo_to_dict(dsn)
    user = info.get("user", "postgres")
    return f"postgresql://{user}@{info['host']}:{info['port']}/{info['dbname']}"


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentfsm", *args],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )  # fmt: skip


def _env(ledger: Path, delay: float) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PQ_LEDGER": str(ledger),
            "PQ_TOOL_DELAY": str(delay)}  # fmt: skip


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _types(dsn: str, run_id: str) -> list[str]:
    with PostgresEventStore(dsn) as store:
        return [e.type for e in store.events(run_id)]


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_the_worker_refuses_a_database_not_set_up(pq_dsn: str, tmp_path: Path) -> None:
    got = _cli("worker", "--store", url_of(pq_dsn),
               "--runner", "tests.runtime._pq_app:make_runner", env=_env(tmp_path / "l.db", 0))  # fmt: skip
    assert got.returncode == 2
    assert "Traceback" not in got.stderr
    assert "no Procrastinate schema yet: run `agentfsm setup --store URL" in got.stderr


def test_the_worker_rejects_what_it_cannot_use(tmp_path: Path) -> None:
    """A SQLite store and a runner that is not there: one line each, exit 2."""
    got = _cli("worker", "--store", str(tmp_path / "runs.db"), "--runner", "x:y")
    assert got.returncode == 2
    assert "the engine runs on PostgreSQL" in got.stderr
    got = _cli("worker", "--store", "postgresql://nowhere.invalid/db", "--runner", "nomod:f")
    assert got.returncode == 2
    assert "cannot import 'nomod'" in got.stderr
    assert "Traceback" not in got.stderr


def test_sigterm_hands_the_run_back_and_exits_0(pq_dsn: str, tmp_path: Path) -> None:
    url = url_of(pq_dsn)
    ledger = tmp_path / "ledger.db"
    setup = _cli("setup", "--store", url)
    assert setup.returncode == 0, setup.stderr
    assert "procrastinate schema at" in setup.stdout
    ready = tmp_path / "ready"
    env = _env(ledger, 1.5)
    worker = subprocess.Popen(
        [sys.executable, "-m", "agentfsm", "worker", "--store", url,
         "--runner", "tests.runtime._pq_app:make_runner", "--name", "w1",
         "--ready-file", str(ready)],
        cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for(ready.exists, 60, "the ready file")
        assert ready.read_text().strip() == str(worker.pid)
        from agentfsm.runtime.procrastinate import Waker

        with Waker().store(pq_dsn) as store:
            submit(store, "r1", "plain")  # get_order (1.5 s), create_ticket (1.5 s), answer
        _wait_for(lambda: "tool.started" in _types(pq_dsn, "r1"), 30, "the first call")
        worker.send_signal(signal.SIGTERM)
        _out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err
    assert "Traceback" not in err
    lines = _lines(err)
    events = [line.get("event") for line in lines]
    assert "worker.ready" in events
    assert "engine.handed_back" in events
    assert "worker.stopped" in events
    assert not ready.exists()
    types = _types(pq_dsn, "r1")
    # The call under way finished; the run stopped before its next step.
    assert types[-1] == "tool.succeeded" or types[-1].startswith("model.")
    assert "run.completed" not in types
    with psycopg.connect(pq_dsn) as conn:
        todo = conn.execute(
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'todo' AND lock = 'r1'"
        ).fetchone()
    assert todo == (1,)
    # A second worker takes the run at once (its lease was released) and finishes it.
    started = time.monotonic()
    again = subprocess.Popen(
        [sys.executable, "-m", "agentfsm", "worker", "--store", url,
         "--runner", "tests.runtime._pq_app:make_runner", "--name", "w2"],
        cwd=ROOT, env={**env, "PQ_TOOL_DELAY": "0"}, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for(lambda: "run.completed" in _types(pq_dsn, "r1"), 60, "the run's end")
        took = time.monotonic() - started
    finally:
        again.send_signal(signal.SIGTERM)
        again.communicate(timeout=30)
    assert again.returncode == 0
    assert took < 15  # no lease to wait out (4 s) on top of a process start
    effects = {tool: n for tool, n, _calls in DurableLedger(ledger).rows().values()}
    assert effects == {"create_ticket": 1}


def test_jobs_lists_per_run_and_refuses_what_would_break_a_run(pq_dsn: str, tmp_path: Path) -> None:
    """Queued, scheduled, running, stalled and failed jobs, per run; `--retry` and
    `--cancel` refuse a job whose run something else drives or still needs."""
    from datetime import UTC, datetime, timedelta

    from agentfsm.runtime.procrastinate import Waker

    url = url_of(pq_dsn)
    assert _cli("setup", "--store", url).returncode == 0
    waker = Waker()
    with waker.store(pq_dsn) as store:
        for run in ("r1", "r2", "r3", "r4"):
            submit(store, run, "plain")
    with psycopg.connect(pq_dsn, autocommit=True) as conn:
        waker.timer(conn, "r1", datetime.now(UTC) + timedelta(hours=1))
        dead = conn.execute(
            "INSERT INTO procrastinate_workers (last_heartbeat) "
            "VALUES (now() - interval '1 hour') RETURNING id"
        ).fetchone()
        live = conn.execute(
            "INSERT INTO procrastinate_workers (last_heartbeat) VALUES (now()) RETURNING id"
        ).fetchone()
        assert dead is not None
        assert live is not None
        set_job = "UPDATE procrastinate_jobs SET status = %s, worker_id = %s WHERE lock = %s"
        conn.execute(set_job, ("doing", live[0], "r2"))
        conn.execute(set_job, ("doing", dead[0], "r3"))
        conn.execute(set_job, ("failed", None, "r4"))
    # (a generous --stalled-after: a busy machine may take seconds to start a command)
    listed = _cli("jobs", "--store", url, "--json", "--stalled-after", "600")
    assert listed.returncode == 0, listed.stderr
    states = {(j["run"], j["task"], j["state"]) for j in _lines(listed.stdout)}
    assert states == {
        ("r1", "advance", "queued"),
        ("r1", "timer", "scheduled"),
        ("r2", "advance", "running"),
        ("r3", "advance", "stalled"),
        ("r4", "advance", "failed"),
    }
    text = _cli("jobs", "--store", url, "--state", "failed")
    assert text.returncode == 0
    assert text.stdout.startswith("run r4\n  job ")
    job = {j["run"] + j["task"]: j["job"] for j in _lines(listed.stdout)}
    # Cancel: not a running job, not the wake-up of a run still going.
    refused = _cli("jobs", "--store", url, "--cancel", str(job["r2advance"]))
    assert refused.returncode == 1
    assert "is running" in refused.stderr
    assert "agentfsm cancel r2" in refused.stderr
    refused = _cli("jobs", "--store", url, "--cancel", str(job["r1advance"]))
    assert refused.returncode == 1
    assert "still going" in refused.stderr
    # Retry: only a failed job, once, as a fresh job.
    refused = _cli("jobs", "--store", url, "--retry", str(job["r1advance"]))
    assert refused.returncode == 1
    assert "not failed" in refused.stderr
    retried = _cli("jobs", "--store", url, "--retry", str(job["r4advance"]))
    assert retried.returncode == 0, retried.stderr
    assert "queued afresh as job" in retried.stdout
    again = _cli("jobs", "--store", url, "--retry", str(job["r4advance"]))
    assert again.returncode == 1
    assert "drives it already" in again.stderr
    missing = _cli("jobs", "--store", url, "--retry", "999999")
    assert missing.returncode == 2
    assert "no job 999999" in missing.stderr
    assert "Traceback" not in missing.stderr + again.stderr + refused.stderr
