"""`approval_node` (issue 31, item 4): a mixed batch across processes, over `ChatOpenAI` and
the fake OpenAI API on 127.0.0.1.

One answer asks for a free call and two calls that need approval. Each leg runs in a process
of its own (`_langgraph_approval_app`), deciding in between in this one: the graph pauses
while a call is undecided (nothing of the answer runs, and the model is not called again),
then runs the free and the approved calls, and the rejected one reaches the model as a
`ToolMessage` carrying its reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentfsm.adapters.langgraph import approval_node
from agentfsm.runtime import approve, reject
from agentfsm.stores import SQLiteEventStore
from tests.adapters._fake_openai import Call, FakeOpenAI, Reply, fake_openai, loopback_only

__all__ = ["fake_openai", "loopback_only"]  # the fixtures, used by name

_ROOT = Path(__file__).resolve().parents[2]


def _leg(workdir: Path, fake: FakeOpenAI, what: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(_ROOT), "LANGSMITH_TRACING": "false"}
    done = subprocess.run(
        [sys.executable, "-m", "tests.adapters._langgraph_approval_app", str(workdir),
         fake.base_url, what],
        capture_output=True, text=True, env=env, cwd=_ROOT, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    outcome: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return outcome


def _ran(workdir: Path) -> list[str]:
    ran = workdir / "ran.txt"
    return ran.read_text().splitlines() if ran.exists() else []


def test_a_mixed_batch_across_processes(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    fake_openai.script += [
        Reply(
            calls=(
                Call("c1", "get_order", {"order_id": "O-1"}),
                Call("c2", "refund", {"order_id": "O-1"}),
                Call("c3", "refund", {"order_id": "O-2"}),
            )
        ),
        Reply(text="Refunded O-1; O-2 was not refunded."),
    ]
    paused = _leg(tmp_path, fake_openai, "run")
    assert (paused["status"], paused["pending"]) == ("waiting_approval", ["c2", "c3"])
    assert _ran(tmp_path) == []  # the whole answer waits, the free call too

    store = SQLiteEventStore(tmp_path / "runs.db")
    approve(store, "r1", "c2", approver="alice")
    half = _leg(tmp_path, fake_openai, "resume")
    assert (half["status"], half["pending"]) == ("waiting_approval", ["c3"])
    assert _ran(tmp_path) == []
    assert len(fake_openai.requests) == 1

    reject(store, "r1", "c3", approver="alice", reason="over the refund limit")
    done = _leg(tmp_path, fake_openai, "resume")
    assert (done["status"], done["final_output"]) == (
        "completed",
        "Refunded O-1; O-2 was not refunded.",
    )
    assert sorted(_ran(tmp_path)) == ["get_order O-1", "refund O-1"]  # each once
    # What the model read next: both results, and the rejection's reason for c3.
    shown = {
        m["tool_call_id"]: m["content"]
        for m in fake_openai.requests[-1][1]["messages"]
        if m["role"] == "tool"
    }
    assert shown == {"c1": "O-1: paid", "c2": "refunded O-1", "c3": "over the refund limit"}
    record = store.load("r1")
    statuses = {a: record.actions[a].status for a in ("c1", "c2", "c3")}
    assert statuses == {"c1": "succeeded", "c2": "succeeded", "c3": "rejected"}


def test_needs_approval_as_a_string_is_refused() -> None:
    with pytest.raises(TypeError, match=r"write \{'refund'\}"):
        approval_node(needs_approval="refund")
