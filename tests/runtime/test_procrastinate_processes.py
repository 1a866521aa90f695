"""The Procrastinate engine with real worker processes, real kills and real partitions.

- Three worker processes drain runs with tools, approvals decided from this process, and
  subagents (one waiting for a person in its own run): every log verifies, every run
  completes, no side effect happens twice for one idempotency key.
- Seeded SIGKILLs of workers at many points while runs flow: nothing acknowledged is lost,
  every run ends, and the time from a kill to the run's next advance is measured.
- A worker in its own network namespace is cut off mid-call: its job runs elsewhere after
  the heartbeat timeout; when the link heals its late append is refused by
  `expected_version`, its job stops (`engine.superseded`, naming the attempt the recovery
  pass closed), that attempt stays closed, and its call is not repeated.

Sizes: `AGENTFSM_PQ_RUNS` runs (default 200, the issue's figure; about 10 s here) and
`AGENTFSM_PQ_KILLS` kill trials (default 100, about 30 s: forked workers restart cheaply).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentfsm.errors import LifecycleError
from agentfsm.events import dump_event
from agentfsm.reducers.validate import validate_lines
from agentfsm.runtime import approve, submit
from agentfsm.stores.postgres import PostgresEventStore
from agentfsm.testing.fixtures.postgres_server import postgres_server, unavailable_reason
from tests.runtime import _pq_app
from tests.runtime.helpers import DurableLedger

ROOT = Path(__file__).resolve().parents[2]
RUNS = int(os.environ.get("AGENTFSM_PQ_RUNS", "200"))
KILLS = int(os.environ.get("AGENTFSM_PQ_KILLS", "100"))
KINDS = ("plain", "approve", "sub", "subask", "mail")


def _worker(dsn: str, ledger: str, name: str) -> None:
    os.environ.setdefault("PQ_TOOL_DELAY", "0.01")
    _pq_app.main([dsn, "agentfsm", ledger, name])


class Cluster:
    """Worker processes forked from this one (cheap to start again after a kill)."""

    def __init__(self, dsn: str, ledger: str, size: int) -> None:
        self.dsn = dsn
        self.ledger = ledger
        self.ctx = multiprocessing.get_context("fork")
        self.procs: list[Any] = [None] * size
        for i in range(size):
            self.start(i)

    def start(self, i: int) -> None:
        proc = self.ctx.Process(target=_worker, args=(self.dsn, self.ledger, f"w{i}"))
        proc.start()
        self.procs[i] = proc

    def kill(self, i: int) -> float:
        killed_at = time.time()
        os.kill(self.procs[i].pid, signal.SIGKILL)
        self.procs[i].join()
        return killed_at

    def stop(self) -> None:
        for proc in self.procs:
            if proc.is_alive():
                proc.terminate()  # SIGTERM: Procrastinate lets the job in hand finish
        for proc in self.procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _approve_waiting(store: PostgresEventStore) -> int:
    """Approve every call waiting for a person (root and subagent runs), from this process."""
    done = 0
    for info in store.runs("waiting_approval"):
        record = store.load(info.run_id)
        for aid in record.pending_approvals:
            try:
                approve(store, info.run_id, aid, approver="tester")
                done += 1
            except LifecycleError:
                pass  # decided, or moved on, meanwhile
    return done


def _wait_all_ended(store: PostgresEventStore, roots: list[str], timeout: float) -> None:
    ended = {"completed", "failed", "cancelled", "terminated"}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _approve_waiting(store)
        statuses = {store.run_info(r).status for r in roots}
        if statuses <= ended:
            return
        time.sleep(0.2)
    left = {r: store.run_info(r).status for r in roots if store.run_info(r).status not in ended}
    raise AssertionError(f"{len(left)} runs did not end: {sorted(left.items())[:10]}")


def _check_logs(store: PostgresEventStore, roots: list[str]) -> None:
    """Every run (children too) completed, its stored log verifies and validates."""
    everything = [i.run_id for i in store.runs()]
    assert {r for r in everything if "/" not in r} == set(roots)
    lines: list[str] = []
    for run_id in everything:
        assert store.verify(run_id).ok, run_id
        lines += [dump_event(e) for e in store.events(run_id)]
    report = validate_lines(lines, keep_going=True)
    assert report.ok, str(report)


def _check_ledger(ledger: str, unknown: int = 0) -> dict[str, tuple[str, int, int]]:
    """No side effect twice per key: tickets honour their key; emails never run again."""
    rows = DurableLedger(ledger).rows()
    for key, (tool, effects, calls) in rows.items():
        assert effects == 1, (key, tool, effects, calls)
        if tool == "send_email":
            assert calls == 1, (key, calls)
    return rows


def test_three_workers_drain_runs_with_approvals_and_subagents(pq_dsn: str, tmp_path: Path) -> None:
    """RUNS runs of five kinds, three worker processes, approvals from this process."""
    engine = _pq_app.engine(pq_dsn, "agentfsm", str(tmp_path / "ledger.db"))
    engine.migrate()
    ledger = str(tmp_path / "ledger.db")
    DurableLedger(ledger)
    roots = [f"r{i:03d}" for i in range(RUNS)]
    with engine.store() as store:
        for i, run_id in enumerate(roots):
            submit(store, run_id, KINDS[i % len(KINDS)])
        cluster = Cluster(pq_dsn, ledger, 3)
        try:
            _wait_all_ended(store, roots, timeout=60 + RUNS)
        finally:
            cluster.stop()
        assert {store.run_info(r).status for r in roots} == {"completed"}
        _check_logs(store, roots)
    rows = _check_ledger(ledger)
    tickets = RUNS // len(KINDS) * 3  # plain, approve and subask runs open one each
    assert len([r for r in rows.values() if r[0] == "create_ticket"]) >= tickets


def test_seeded_kills_lose_nothing_and_every_run_ends(pq_dsn: str, tmp_path: Path) -> None:
    """KILLS trials: submit runs, wait a seeded while, SIGKILL a seeded worker, start it
    again. Every acknowledged run ends completed; recovery time is measured."""
    seed = int(os.environ.get("AGENTFSM_PQ_SEED", "19"))
    rng = random.Random(seed)
    ledger = str(tmp_path / "ledger.db")
    DurableLedger(ledger)
    engine = _pq_app.engine(pq_dsn, "agentfsm", ledger)
    engine.migrate()
    roots: list[str] = []
    kills: list[float] = []
    with engine.store() as store:
        cluster = Cluster(pq_dsn, ledger, 3)
        try:
            for trial in range(KILLS):
                for k in range(2):
                    run_id = f"k{trial:03d}-{k}"
                    submit(store, run_id, KINDS[(trial + k) % len(KINDS)])
                    roots.append(run_id)  # acknowledged: submit returned
                _approve_waiting(store)
                time.sleep(rng.uniform(0.02, 0.3))
                victim = rng.randrange(3)
                kills.append(cluster.kill(victim))
                cluster.start(victim)
            _wait_all_ended(store, roots, timeout=120)
        finally:
            cluster.stop()
        statuses = {store.run_info(r).status for r in roots}
        assert statuses == {"completed"}, statuses
        _check_logs(store, roots)
    _check_ledger(ledger)
    times = _recovery_times(pq_dsn, kills)
    settings = engine.settings
    bound = settings.stalled_after + 2 * settings.recover_every + 5.0  # a loaded 2-core box
    print(
        f"\n{KILLS} kills (seed {seed}), {len(roots)} runs, {len(times)} jobs recovered; "
        f"recovery s: median {statistics.median(times):.2f}, max {max(times):.2f} "
        f"(heartbeat {settings.heartbeat} s, stalled after {settings.stalled_after} s)"
    )
    assert times, "no kill landed on a job in flight"
    assert max(times) < bound


def _recovery_times(dsn: str, kills: list[float]) -> list[float]:
    """Per job the recovery pass failed: from the first kill after the job started (at or
    before the kill that stopped it, so an upper bound) to the run's next advance starting."""
    with psycopg.connect(dsn) as conn:
        failed = conn.execute(
            "SELECT j.args->>'run_id', f.at, (SELECT max(s.at) FROM procrastinate_events s "
            "WHERE s.job_id = j.id AND s.type = 'started') FROM procrastinate_jobs j "
            "JOIN procrastinate_events f ON f.job_id = j.id "
            "WHERE f.type = 'failed' AND j.task_name = 'agentfsm.advance'"
        ).fetchall()
        times: list[float] = []
        for run_id, failed_at, started_at in failed:
            kill = min((k for k in kills if k >= started_at.timestamp()), default=None)
            if kill is None:
                continue
            row = conn.execute(
                "SELECT min(e.at) FROM procrastinate_jobs j JOIN procrastinate_events e "
                "ON e.job_id = j.id WHERE e.type = 'started' AND j.args->>'run_id' = %s "
                "AND e.at > %s",
                (run_id, failed_at),
            ).fetchone()
            if row is not None and isinstance(row[0], datetime):
                times.append(row[0].timestamp() - kill)
    return times


# -- partitions ---------------------------------------------------------------------------


def _netns_unavailable() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_NET_ADMIN)"
    probe = f"afprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"the kernel refused a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=False)
    return None


class Netns:
    """A network namespace behind a veth pair: host end 10.213.N.1, namespace end .2."""

    def __init__(self) -> None:
        n = os.getpid() % 250
        self.name = f"afq{os.getpid()}"
        self.host_if, self.ns_if = f"afh{n}", f"afn{n}"
        self.host_ip, self.ns_ip = f"10.213.{n}.1", f"10.213.{n}.2"
        self.net = f"10.213.{n}.0/30"
        ip = ["ip"]
        self._sh(*ip, "netns", "add", self.name)
        self._sh(*ip, "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        self._sh(*ip, "link", "set", self.ns_if, "netns", self.name)
        self._sh(*ip, "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        self._sh(*ip, "link", "set", self.host_if, "up")
        self._in("ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
        self._in("ip", "link", "set", self.ns_if, "up")
        self._in("ip", "link", "set", "lo", "up")

    @staticmethod
    def _sh(*cmd: str) -> None:
        subprocess.run(cmd, check=True, capture_output=True)

    def _in(self, *cmd: str) -> None:
        self._sh("ip", "netns", "exec", self.name, *cmd)

    def cut(self) -> None:
        """Take the host end down: packets are dropped, nothing errors (a partition)."""
        self._sh("ip", "link", "set", self.host_if, "down")

    def heal(self) -> None:
        self._sh("ip", "link", "set", self.host_if, "up")

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], check=False, capture_output=True)


@pytest.fixture
def netns() -> Iterator[Netns]:
    why = _netns_unavailable()
    if why is not None:
        pytest.skip(f"partition tests need network namespaces: {why}")
    space = Netns()
    try:
        yield space
    finally:
        space.remove()


def _spawn(dsn: str, ledger: str, name: str, netns: Netns | None, delay: float) -> Any:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PQ_TOOL_DELAY": str(delay),
        "PQ_LOG": "WARNING",
        "PYTHONUNBUFFERED": "1",
    }
    cmd = [sys.executable, "-m", "tests.runtime._pq_app", dsn, "agentfsm", ledger, name]
    if netns is not None:
        cmd = ["ip", "netns", "exec", netns.name, *cmd]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


class Output:
    """A worker process's output, read on a thread as it comes (line by line, all of it)."""

    def __init__(self, proc: Any) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def has(self, word: str) -> bool:
        return any(word in line for line in self.lines)

    def line(self, word: str) -> str:
        return next(line for line in self.lines if word in line)


_OUTPUTS: list[Output] = []


def _wait(what: Any, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() >= deadline:
            shown = "\n".join(f"--- pid {o.proc.pid}:\n{o.text()}" for o in _OUTPUTS)
            raise AssertionError(f"timed out; worker output:\n{shown}")
        time.sleep(0.05)


def _advance_jobs(dsn: str, run_id: str) -> dict[int, str]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT id, status::text FROM procrastinate_jobs WHERE task_name = %s "
            "AND args->>'run_id' = %s ORDER BY id",
            ("agentfsm.advance", run_id),
        ).fetchall()
    return dict(rows)


def test_a_partitioned_worker_is_replaced_and_its_late_append_refused(
    netns: Netns, tmp_path: Path
) -> None:
    """Cut off mid-call, the worker's job runs elsewhere after the heartbeat timeout; the
    email it sent is recorded `outcome_unknown` (not sent again); healed, its late
    `tool.completed` is refused and it stops."""
    if unavailable_reason() is not None:
        pytest.skip(unavailable_reason() or "")
    ledger = str(tmp_path / "ledger.db")
    DurableLedger(ledger)
    with postgres_server(listen=[netns.host_ip], trust=[netns.net]) as server:
        local = server.dsn
        remote = f"host={netns.host_ip} port={server.port} user=postgres dbname=postgres"
        engine = _pq_app.engine(local, "agentfsm", ledger)
        engine.migrate()
        cut_off = _spawn(remote, ledger, "w-cut", netns, delay=3.0)
        cut_out = Output(cut_off)
        _OUTPUTS[:] = [cut_out]
        other = None
        try:
            with engine.store() as store:
                submit(store, "p1", "mail")
                _wait(lambda: "tool.started" in [e.type for e in store.events("p1")], 30)
                (first_job,) = _advance_jobs(local, "p1")
                time.sleep(0.5)  # the email is being sent
                netns.cut()
                cut_at = time.monotonic()
                other = _spawn(local, ledger, "w-other", None, delay=0.0)
                _OUTPUTS.append(Output(other))
                _wait(lambda: store.run_info("p1").status == "completed", 30)
                took = time.monotonic() - cut_at
                time.sleep(3.0)  # the cut-off worker's email returns meanwhile
                netns.heal()
                # Its late `tool.completed` is refused (`run.superseded`: another attempt
                # drove the run), and the job stops there: `engine.superseded`.
                _wait(lambda: cut_out.has("engine.superseded"), 60)
                types = [e.type for e in store.events("p1")]
                assert store.verify("p1").ok
                stopped = cut_out.line("engine.superseded")
                jobs = _advance_jobs(local, "p1")
                # The job that stopped is the attempt the recovery pass closed, and its
                # late `finish` did not reopen or end anything: the new attempt succeeded.
                assert re.search(rf"job_id={first_job}\b", stopped), stopped
                assert jobs[first_job] == "failed"
                assert "succeeded" in [s for j, s in jobs.items() if j != first_job], jobs
                assert cut_out.has("run.superseded")
                assert cut_off.poll() is None  # the worker goes on serving
        finally:
            netns.heal()
            for proc in (cut_off, other):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
                if proc is not None and proc.stdout is not None:
                    proc.stdout.close()
    assert types.count("tool.outcome_unknown") == 1
    assert "tool.completed" not in types[: types.index("tool.outcome_unknown")]
    rows = DurableLedger(ledger).rows()
    assert [(tool, calls) for tool, _, calls in rows.values()] == [("send_email", 1)]
    assert took < engine.settings.stalled_after + 10
    print(f"\npartitioned worker replaced in {took:.2f} s (run completed elsewhere)")
