"""The runtime examples run, end as their docstrings say, and export a valid log."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from agentfsm.reducers import Reducer
from agentfsm.reducers.validate import validate_lines
from agentfsm.stores import SQLiteEventStore, StoreOptions
from agentfsm.ui import Source

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _demo() -> object:
    spec = importlib.util.spec_from_file_location("demo_runtime", EXAMPLES / "demo_runtime.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["demo_runtime"] = module
    spec.loader.exec_module(module)
    return module


def test_the_runtime_demo_runs_every_scenario(tmp_path: Path) -> None:
    """Each scenario ends where it should, the exported log validates, and the store opens
    the web UI on an inbox with the refund left waiting for its approver."""
    demo = _demo()
    export = tmp_path / "runs.jsonl"
    results = demo.run_all(tmp_path, export)  # type: ignore[attr-defined]
    summary = {r.run_id: (r.status, r.stop_reason) for r in results}
    assert summary == {
        "order-O-1001": ("completed", None),
        "cancel-123": ("completed", None),
        "runaway-1": ("terminated", "loop_detected"),
        "budget-1": ("terminated", "budget"),
        "parallel-1": ("completed", None),
        "crash-1": ("completed", None),
        "refund-77": ("waiting_approval", None),
    }
    crash = next(r for r in results if r.run_id == "crash-1")
    assert [a.tool for a in crash.unknown_outcomes] == ["send_confirmation"]
    with export.open(encoding="utf-8") as lines:
        report = validate_lines(lines, keep_going=True)
    assert report.ok
    assert len(report.runs) == 7
    # `agentfsm ui --store .demo/runs.db` after `make demo`: the inbox holds the refund.
    source = Source(
        lambda table: SQLiteEventStore(
            tmp_path / "runs.db", options=StoreOptions(reducer=Reducer(table))
        )
    )
    calls = [(c.record.run_id, c.action_id) for c in source.pending().calls]
    assert calls == [("refund-77", "t2.1")]

