"""A Claude run paused on one machine resumes as a Procrastinate job on another.

Machine A (a process with its own `CLAUDE_CONFIG_DIR` and working directory) runs the
Claude agent until its refund waits for approval; a person approves from this process
through the engine's store, which queues the run's advance; machine B (another process,
another config dir, a worker of the engine) takes the job, and `AdapterJobs` resumes the
run there with `ClaudeRun.resume`: the CLI's session comes from the store, the refund runs
once, on B, and the run completes. Only the PostgreSQL store is in common. Once with the
scripted CLI (which keeps its session where the real CLI keeps its transcript), once with
the real bundled CLI against a fake Messages API on 127.0.0.1 (skipped without the
bundled CLI; failed under `CI=true`, as the other contract tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")
pytest.importorskip("procrastinate")

from agentfsm.runtime import approve
from agentfsm.testing.fixtures.claude_transport import COST_PER_ANSWER
from tests.adapters._claude_pq_app import engine
from tests.adapters.test_claude_cli import no_network  # noqa: F401  (loopback only)
from tests.runtime import _pq_app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def pq_dsn(postgres_dsn: str) -> Iterator[str]:
    """A fresh database (Procrastinate's tables are not prefixed)."""
    with _pq_app.fresh_database(postgres_dsn) as dsn:
        yield dsn


@pytest.fixture(params=["scripted", "real"])
def api(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """None for the scripted CLI; the fake Messages API's URL for the real one."""
    if request.param == "scripted":
        yield None
        return
    from tests.adapters._fake_anthropic import FakeAnthropic
    from tests.adapters.test_claude_cli import bundled_cli, script

    if bundled_cli() is None:
        reason = "the claude-agent-sdk wheel without its bundled CLI (an sdist install)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so the real CLI's contract tests must run: {reason}")
        pytest.skip(reason)
    with FakeAnthropic(script) as server:
        yield server.url


def machine(role: str, dsn: str, config: Path, calls: Path, api: str | None) -> Any:
    """Run `role` (`pause`, `work`) in a process of its own with its config dir."""
    argv = [role, dsn, str(config), str(calls), *([api] if api else [])]
    out = subprocess.run(
        [sys.executable, "-m", "tests.adapters._claude_pq_app", *argv],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def jobs(dsn: str) -> list[tuple[str, str]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT task_name, status::text FROM procrastinate_jobs ORDER BY id"
        ).fetchall()
    return [(str(t), str(s)) for t, s in rows]


def test_a_run_paused_on_one_machine_completes_as_a_job_on_another(
    pq_dsn: str, tmp_path: Path, api: str | None
) -> None:
    """Paused on A; approved here; B's worker resumes and completes it from the store."""
    a, b, calls = tmp_path / "machine-a", tmp_path / "machine-b", tmp_path / "calls.txt"
    setup = engine(pq_dsn, a, calls)
    setup.migrate()
    paused = machine("pause", pq_dsn, a, calls, api)
    assert (paused["status"], paused["pending"]) == ("waiting_approval", ["toolu_r1"])
    leg = paused["usage"]["cost"]  # the CLI's cost of the first leg, in the record already
    assert leg == COST_PER_ANSWER if api is None else leg > 0
    assert len(paused["sessions"]) == 1  # A's CLI session, on A only
    assert not calls.exists()
    with setup.store() as store:
        approve(store, "c1", "toolu_r1", approver="ann")  # queues the run's advance
    done = machine("work", pq_dsn, b, calls, api)
    said = "Refunded O-1." if api is None else "Refunded."
    assert (done["status"], done["final_output"]) == ("completed", said)
    ran = "refund O-1 on machine-b" if api is None else "refund O-1"
    assert calls.read_text(encoding="utf-8") == ran + "\n"  # once, on B
    assert done["sessions"] == paused["sessions"]  # the same session, written back on B
    assert done["usage"]["cost"] > leg  # the CLI's total over both legs
    assert (done["usage"]["input_tokens"], done["usage"]["output_tokens"]) == (20, 10)
    assert ("agentfsm.advance", "succeeded") in jobs(pq_dsn)
    with setup.store() as store:
        assert store.verify("c1").ok
        assert store.attachment("c1", "claude-agent-sdk/session") is None
        assert store.attachment("c1", "claude-agent-sdk/transcript") is None
