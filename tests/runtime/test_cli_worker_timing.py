"""`agentfsm worker --heartbeat SECONDS --stalled-after SECONDS`, run as an operator runs it.

The engine's heartbeat interval and stalled-job threshold (`EngineSettings.heartbeat`,
`stalled_after`) from the command line: checked before anything is opened (more than 0;
the threshold more than the heartbeat, a usage error otherwise, exit 2, one line), then
what the worker runs with: its ready line says both, and its heartbeats in
`procrastinate_workers` come at the interval given.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.runtime.test_cli_worker import ROOT, _cli, _env, _wait_for, url_of

RUNNER = "tests.runtime._pq_app:make_runner"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--heartbeat", "2", "--stalled-after", "2"],
         "--stalled-after (2 s) must be more than --heartbeat (2 s)"),
        (["--heartbeat", "5"], "--stalled-after (4 s) must be more than --heartbeat (5 s)"),
        (["--stalled-after", "0.5"], "--stalled-after (0.5 s) must be more than --heartbeat (1 s)"),
        (["--heartbeat", "0"], "argument --heartbeat: want seconds more than 0, got '0'"),
        (["--stalled-after", "soon"], "argument --stalled-after: want seconds from 0 to"),
    ],
    ids=["equal", "default-threshold-below", "default-heartbeat-above", "zero", "not-a-number"],
)  # fmt: skip
def test_timings_that_would_make_a_live_worker_look_stalled_are_refused(
    flags: list[str], says: str, tmp_path: Path
) -> None:
    """Refused before any connection (the database named does not exist)."""
    got = _cli("worker", "--store", "postgresql://nowhere.invalid/db", "--runner", RUNNER,
               *flags, env=_env(tmp_path / "l.db", 0))  # fmt: skip
    assert got.returncode == 2, got.stderr
    assert says in got.stderr
    assert "Traceback" not in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1


def _heartbeats(dsn: str, seconds: float) -> list[float]:
    """The worker's `last_heartbeat` times (epoch seconds), read every 20 ms for `seconds`."""
    seen: list[float] = []
    deadline = time.monotonic() + seconds
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(
                "SELECT EXTRACT(EPOCH FROM last_heartbeat) FROM procrastinate_workers"
            ).fetchone()
            if row is not None and (not seen or float(row[0]) != seen[-1]):
                seen.append(float(row[0]))
            time.sleep(0.02)
    return seen


def test_the_worker_runs_with_the_timings_given(pq_dsn: str, tmp_path: Path) -> None:
    url = url_of(pq_dsn)
    assert _cli("setup", "--store", url).returncode == 0
    ready = tmp_path / "ready"
    log = tmp_path / "worker.log"
    with log.open("w") as err:
        worker = subprocess.Popen(
            [sys.executable, "-m", "agentfsm", "worker", "--store", url, "--runner", RUNNER,
             "--heartbeat", "0.25", "--stalled-after", "1.5", "--ready-file", str(ready)],
            cwd=ROOT, env=_env(tmp_path / "l.db", 0), stderr=err, stdout=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            _wait_for(ready.exists, 60, "the ready file")
            beats = _heartbeats(pq_dsn, 2.0)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(30)
    assert worker.returncode == 0
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    (said,) = [line for line in lines if line.get("event") == "worker.ready"]
    assert (said["heartbeat"], said["stalled_after"]) == (0.25, 1.5)
    # The default heartbeat (1 s) would give 2 or 3 in two seconds; 0.25 s gives about 8.
    assert len(beats) >= 5, beats
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert max(gaps) < 0.75, gaps
