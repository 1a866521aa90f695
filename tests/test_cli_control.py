"""The store commands through the real console script, on a real SQLite store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentfsm import LogBuilder, SQLiteEventStore

AGENTFSM = Path(sys.executable).parent / "agentfsm"
CALL = {"action_id": "a1", "tool": "cancel_order", "arguments": {"order_id": 123}}


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(AGENTFSM), *args], capture_output=True, text=True, check=False,
        env={**os.environ, "NO_COLOR": "1", **(env or {})},
    )  # fmt: skip


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    """A store with run `r1` waiting for approval of `a1`."""
    path = tmp_path / "runs.db"
    log = LogBuilder("r1")
    log.add("run.started", objective="cancel")
    log.add("model.started")
    log.add("model.completed", decision="tool_calls", tool_calls=[CALL])
    log.add("approval.requested", **CALL)
    with SQLiteEventStore(path) as store:
        store.append("r1", log.events, 0)
    return path


def test_approve_appends_the_decision(store_path: Path) -> None:
    """The approval is durable and the run is runnable again."""
    result = run("approve", "r1", "a1", "--approver", "ann", "--store", str(store_path))
    assert (result.returncode, result.stdout.splitlines()[-1]) == (0, "run r1: running (version 5)")
    with SQLiteEventStore(store_path) as store:
        action = store.load("r1").actions["a1"]
    assert (action.status, action.approver) == ("approved", "ann")


def test_approving_twice_is_refused_with_exit_one(store_path: Path) -> None:
    """A call already decided cannot be decided again: the refusal names who decided it,
    when and why (not that the event is not allowed in `running`); nothing is written."""
    store = str(store_path)
    run("reject", "r1", "a1", "--approver", "ann", "--reason", "not yours", "--store", store)
    with SQLiteEventStore(store_path) as opened:
        decided = list(opened.events("r1"))[-1]
    for verb in ("approve", "reject"):
        result = run(verb, "r1", "a1", "--approver", "bob", "--store", store)
        assert (result.returncode, result.stdout, result.stderr) == (
            1,
            "",
            f"agentfsm {verb}: refused: run 'r1': call 'a1' was already rejected by 'ann' at "
            f"{decided.occurred_at} (sequence 5), with the reason 'not yours'\n",
        )
    with SQLiteEventStore(store_path) as opened:
        assert opened.load("r1").version == 5


def test_reject_cancel_runs_and_export(store_path: Path) -> None:
    """Reject with a reason, cancel, list and export: the exported log validates."""
    env = {"AGENTFSM_STORE": str(store_path)}
    assert run("reject", "r1", "a1", "--reason", "not yours", env=env).returncode == 0
    assert run("cancel", "r1", "--reason", "user left", env=env).stdout.strip() == (
        "run r1: cancel_requested (version 6)"
    )
    listed = json.loads(run("runs", "--format", "json", env=env).stdout)
    assert [(r["run_id"], r["status"], r["version"]) for r in listed] == [
        ("r1", "cancel_requested", 6)
    ]
    exported = run("export", env=env).stdout
    assert len(exported.splitlines()) == 6
    check = subprocess.run(
        [str(AGENTFSM), "validate", "-"],
        input=exported,
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["approve", "r1", "a1"], "agentfsm approve: give --store PATH|URL or set AGENTFSM_STORE"),
        (
            ["approve", "r1", "a1", "--store", "/no/such.db"],
            "agentfsm approve: no SQLite store at '/no/such.db'",
        ),
    ],
)
def test_store_usage_errors(args: list[str], message: str) -> None:
    """A missing or mistyped store is one line and exit 2 — and creates no empty database."""
    result = run(*args, env={"AGENTFSM_STORE": ""})
    assert (result.returncode, result.stderr.strip()) == (2, message)
    assert not Path("/no/such.db").exists()


def test_unknown_run_is_a_usage_error(store_path: Path) -> None:
    """Steering a run the store does not have says so."""
    result = run("cancel", "nope", "--store", str(store_path))
    assert result.returncode == 2
    assert result.stderr.startswith("agentfsm cancel: run 'nope' is not in the store")


def test_pause_then_resume(store_path: Path) -> None:
    """`resume` (the other half of `pause`; `Runner.drive` drives) makes a paused run runnable."""
    store = str(store_path)
    run("approve", "r1", "a1", "--store", store)
    assert run("pause", "r1", "--reason", "callback", "--store", store).stdout.strip() == (
        "run r1: paused (version 6)"
    )
    result = run("resume", "r1", "--store", store)
    assert (result.returncode, result.stdout.strip()) == (0, "run r1: running (version 7)")


@pytest.mark.parametrize(
    ("field", "what"),
    [
        ("occurred_at=2026-09-01T10:00:00Z", "'occurred_at' is set by the append (its time)"),
        ("run_id=r2", "'run_id' is set by the append (the run it appends to)"),
        ("sequence:=9", "'sequence' is set by the append (the run's next sequence)"),
        ("type=run.failed", "'type' is set by the append (the event type it is given)"),
    ],
)
def test_append_refuses_a_field_it_sets_itself(store_path: Path, field: str, what: str) -> None:
    """A field of the envelope the command stamps is named in one line (exit 2), not a
    `TypeError` about keyword arguments; nothing is written."""
    args = ("append", "r1", "run.cancel_requested", "reason=left", field)
    result = run(*args, "--store", str(store_path))
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        f"agentfsm append: error: run 'r1': not a valid event: field {what}; leave it out\n",
    )
    with SQLiteEventStore(store_path) as store:
        assert store.load("r1").version == 4


def test_append_takes_a_field_named_like_a_keyword_of_the_verb(store_path: Path) -> None:
    """`clock=` is a field like any other (here one the type lacks), not the verb's clock."""
    args = ("append", "r1", "run.cancel_requested", "clock=noon", "--store", str(store_path))
    result = run(*args)
    assert (result.returncode, result.stderr) == (
        2,
        "agentfsm append: error: run 'r1': not a valid event: field 'clock' is not part of "
        "'run.cancel_requested'\n",
    )
