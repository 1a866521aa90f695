"""Contract tests: `ClaudeRun` over the real `claude` CLI the SDK bundles, against a fake API.

The CLI runs as the SDK starts it, talking to a fake Anthropic Messages API these tests serve
on 127.0.0.1 (streamed server-sent events, scripted answers): approve, deny, interrupt (a
cancel from elsewhere while a tool runs), a guard's stop, and a resume in a new process.
Nothing leaves the machine: the CLI's base URL is loopback, its nonessential traffic is off,
and any other address goes to a proxy that is not there. Without the SDK or its bundled CLI
the tests skip; under `CI=true` they fail (the module does not import, or each test fails),
since the dev extra installs both.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("CI") == "true":
    import claude_agent_sdk  # noqa: F401  (under CI a missing SDK fails the run, loudly)
else:
    pytest.importorskip("claude_agent_sdk")

from structlog.testing import capture_logs

from agentfsm.adapters._claude_sessions import TRANSCRIPT
from agentfsm.adapters.claude_agent_sdk import ClaudeRun, Subagent
from agentfsm.events.models import Limits
from agentfsm.guards import MaxTurns
from agentfsm.runtime import approve, cancel, reject
from agentfsm.stores import SQLiteEventStore
from tests.adapters._claude_app import CALLS_FILE, options
from tests.adapters._common import types, validates
from tests.adapters._fake_anthropic import FakeAnthropic, Reply, ToolUse
from tests.adapters.conftest import NetworkAttemptError

ROOT = Path(__file__).resolve().parents[2]
REFUND = "mcp__shop__refund"
SLOW = "mcp__shop__slow"
DELEGATE = "mcp__subagents__refunds"


def bundled_cli() -> Path | None:
    """The `claude` binary in the SDK's platform wheel, if it is there."""
    import claude_agent_sdk

    path = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"
    return path if path.exists() else None


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback only (our gateway, in this process, reaches the fake API on 127.0.0.1);
    any other address fails the test, as everywhere in the adapters' tests."""
    import socket

    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def loopback(address: object) -> None:
        host = address[0] if isinstance(address, tuple) else None
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise NetworkAttemptError(f"network access attempted: {address!r}")

    def guarded(self: socket.socket, address: Any) -> Any:
        loopback(address)
        return connect(self, address)

    def guarded_ex(self: socket.socket, address: Any) -> Any:
        loopback(address)
        return connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_ex)


@pytest.fixture(autouse=True)
def _cli() -> None:
    if bundled_cli() is None:
        reason = "the claude-agent-sdk wheel without its bundled CLI (an sdist install)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so the real CLI's contract tests must run: {reason}")
        pytest.skip(reason)


def script(body: dict[str, Any]) -> Reply | None:
    """The model: by the prompt, and by how many answers the conversation already holds."""
    if not body.get("tools"):
        return None  # a side request of the CLI's
    messages = body.get("messages", [])
    prompt = json.dumps(messages[0]) if messages else ""
    step = sum(1 for m in messages if m["role"] == "assistant")
    said = [m for m in messages if m["role"] == "user"]  # the CLI may add system notes after
    last = json.dumps(said[-1]) if said else ""
    if '"refund it"' in prompt:  # the CLI's own general-purpose subagent (its `Agent` tool)
        if step == 0:
            return Reply(tools=(ToolUse("toolu_c1", REFUND, {"order_id": "O-1"}),))
        return Reply(text="Refunded." if "refunded O-1" in last else "Not refunded.")
    if "ask the refunds agent" in prompt:
        if step == 0:
            return Reply(tools=(ToolUse("toolu_m1", DELEGATE, {"prompt": "refund O-1"}),))
        return Reply(text=f"The agent said: {json.loads(last)['content'][0]['content'][0]['text']}")
    if "ask the cli's agent" in prompt:
        if step == 0:
            use = {"description": "refund", "prompt": "refund it", "subagent_type": "general-purpose",
                   "run_in_background": False}  # fmt: skip
            return Reply(tools=(ToolUse("toolu_n1", "Agent", use),))
        return Reply(text="Done.")
    if "refund O-1" in prompt:
        if step == 0:
            return Reply(tools=(ToolUse("toolu_r1", REFUND, {"order_id": "O-1"}),))
        return Reply(text="Refunded." if "refunded O-1" in last else "Not refunded.")
    if "batch" in prompt:  # e.g. "batch rf": a refund (O-1) and a free look-up, in that order
        order = prompt.split("batch ")[1][:3].rstrip('"\\ ')
        uses = {"r": ToolUse("toolu_r1", REFUND, {"order_id": "O-1"}),
                "q": ToolUse("toolu_r2", REFUND, {"order_id": "O-2"}),
                "f": ToolUse("toolu_f1", SLOW, {"seconds": 0.0})}  # fmt: skip
        if step == 0:
            return Reply(tools=tuple(uses[c] for c in order))
        results = [b for b in said[-1]["content"] if b.get("type") == "tool_result"]
        return Reply(text=" | ".join(_said(b) for b in results))
    if "think slowly" in prompt:  # an answer that takes its time to come
        return Reply(text="never finished", delay=30.0)
    if "slowly" in prompt:
        if step == 0:
            return Reply(tools=(ToolUse("toolu_s1", SLOW, {"seconds": 30.0}),))
        return Reply(text="never said")
    if "twice" in prompt:
        if step < 2:
            return Reply(tools=(ToolUse(f"toolu_t{step}", SLOW, {"seconds": 0.0}),))
        return Reply(text="never said")
    return Reply(text="?")


def _said(result: dict[str, Any]) -> str:
    """A tool result's text, as the model read it."""
    content = result.get("content")
    if isinstance(content, list):
        content = "".join(str(c.get("text", "")) for c in content)
    return str(content)


@pytest.fixture
def api() -> Iterator[FakeAnthropic]:
    """The fake Messages API, serving `script` on 127.0.0.1."""
    with FakeAnthropic(script) as server:
        yield server


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file the tools log to (read by `ran`)."""
    path = tmp_path / "calls.txt"
    monkeypatch.setenv(CALLS_FILE, str(path))
    return path


def ran(calls: Path) -> list[str]:
    """What the tools did, in order."""
    return calls.read_text(encoding="utf-8").splitlines() if calls.exists() else []


def drive(coro: Any) -> Any:
    with capture_logs():
        return asyncio.run(coro)


def resume_elsewhere(
    db: Path, run_id: str, api: FakeAnthropic, config: Path, calls: Path, *, cost: bool = False
) -> Any:
    """Resume `run_id` in a new process (the store and the CLI's config dir are all it has):
    its status and final output (and with `cost`, the CLI's `total_cost_usd`)."""
    argv = [str(db), run_id, api.url, str(config), str(calls)]
    out = subprocess.run(
        [sys.executable, "-m", "tests.adapters._claude_app", *argv],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    done = json.loads(out.stdout.strip().splitlines()[-1])
    if not cost:
        del done["total_cost_usd"]
    return done


def pause(store: SQLiteEventStore, api: FakeAnthropic, config: Path) -> Any:
    """Run r1 asks to refund O-1, which needs approval: it waits."""
    run = ClaudeRun(store, "r1", needs_approval={REFUND})
    paused = drive(run.arun("refund O-1", options(api.url, config)))
    assert (paused.status, paused.record.pending_approvals) == ("waiting_approval", ("toolu_r1",))
    return paused


class TestRealCLI:
    """The adapter's promises, kept with the SDK's real CLI."""

    def test_an_approved_call_runs_when_a_new_process_resumes_the_session(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """The CLI defers the call; approve(); a new process resumes the CLI's session from
        what our store kept, the replayed call runs, the model answers; the log validates."""
        db, config = tmp_path / "runs.db", tmp_path / "claude"
        store = SQLiteEventStore(db)
        paused = pause(store, api, config)
        kept = json.loads(paused.state)
        assert kept["deferred"] == {"id": "toolu_r1", "name": REFUND, "input": {"order_id": "O-1"}}
        assert ran(calls) == []
        # While it waits, the record holds what the CLI reported: its cost and tokens.
        assert paused.sdk_result.total_cost_usd > 0
        assert spent(store.load("r1")) == (10, 5, paused.sdk_result.total_cost_usd)
        approve(store, "r1", "toolu_r1", approver="alice")
        out = resume_elsewhere(db, "r1", api, config, calls, cost=True)
        total = out.pop("total_cost_usd")
        assert out == {"status": "completed", "final_output": "Refunded."}
        assert ran(calls) == ["refund O-1"]
        assert types(store, "r1") == [
            "run.started", "model.started", "model.completed", "approval.requested",
            "approval.accepted", "tool.requested", "tool.started", "tool.completed",
            "model.started", "model.completed", "run.completed",
        ]  # fmt: skip
        record = store.load("r1")
        assert record.actions["toolu_r1"].result == "refunded O-1"
        # The CLI's total over both legs (read back from the session by the new process).
        assert spent(record) == (20, 10, total)
        assert total > paused.sdk_result.total_cost_usd
        assert store.attachment("r1", "claude-agent-sdk/session") is None
        assert validates(store, "r1", tmp_path) == 0

    def test_a_paused_run_is_driven_on_on_another_machine_with_only_the_store_in_common(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """The CLI's transcript is kept in the store at the pause and written back into
        the resuming process's own (empty) config dir, under its own working directory."""
        db, here, there = tmp_path / "runs.db", tmp_path / "here", tmp_path / "there"
        store = SQLiteEventStore(db)
        paused = pause(store, api, here)
        session = json.loads(paused.state)["session_id"]
        kept = store.attachment("r1", TRANSCRIPT)
        assert kept is not None
        assert session.encode() in kept.data
        approve_elsewhere(db, "r1", "toolu_r1")
        out = resume_elsewhere(db, "r1", api, there, calls)
        assert out == {"status": "completed", "final_output": "Refunded."}
        assert ran(calls) == ["refund O-1"]
        assert list((there / "projects").glob(f"*/{session}.jsonl"))
        assert store.attachment("r1", TRANSCRIPT) is None
        assert validates(store, "r1", tmp_path) == 0

    def test_under_bypass_permissions_approvals_still_wait_and_nothing_warns(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """`bypassPermissions` (the CLI asks no `can_use_tool`): our `PreToolUse` still
        defers the refund, and the SDK warns of no shadowed `can_use_tool` we set."""
        from claude_agent_sdk import CanUseToolShadowedWarning

        store = SQLiteEventStore(tmp_path / "runs.db")
        opts = options(api.url, tmp_path / "claude")
        opts = replace(
            opts, permission_mode="bypassPermissions", env={**opts.env, "IS_SANDBOX": "1"}
        )
        run = ClaudeRun(store, "r1", needs_approval={REFUND})
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            paused = drive(run.arun("refund O-1", opts))
        assert [w for w in seen if issubclass(w.category, CanUseToolShadowedWarning)] == []
        assert (paused.status, paused.record.pending_approvals) == (
            "waiting_approval",
            ("toolu_r1",),
        )
        assert ran(calls) == []

    def test_a_rejected_call_never_runs_and_the_model_reads_why(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """reject(); the resumed session denies the replayed call with the reason."""
        db, config = tmp_path / "runs.db", tmp_path / "claude"
        store = SQLiteEventStore(db)
        pause(store, api, config)
        reject(store, "r1", "toolu_r1", approver="bob", reason="over the limit")
        out = resume_elsewhere(db, "r1", api, config, calls)
        assert out == {"status": "completed", "final_output": "Not refunded."}
        assert ran(calls) == []
        assert "over the limit" in json.dumps(api.requests[-1]["messages"][-1])
        assert validates(store, "r1", tmp_path) == 0

    def test_a_cancel_from_elsewhere_interrupts_a_running_tool_whose_outcome_is_unknown(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """cancel() while a slow tool runs: the adapter interrupts the CLI, the tool is
        cancelled, the call is outcome unknown (never failed), the run cancelled."""
        store = SQLiteEventStore(tmp_path / "runs.db")

        async def go() -> Any:
            run = ClaudeRun(store, "r1", cancel_poll=0.05)
            task = asyncio.ensure_future(run.arun("look slowly", options(api.url, tmp_path)))
            while "slow started" not in ran(calls):
                await asyncio.sleep(0.05)
            cancel(SQLiteEventStore(tmp_path / "runs.db"), "r1", reason="closed the tab")
            return await asyncio.wait_for(task, 60)

        done = drive(go())
        assert (done.status, done.record.cancel_reason) == ("cancelled", "closed the tab")
        assert done.record.actions["toolu_s1"].status == "unknown"
        assert done.sdk_result.subtype == "error_during_execution"
        assert spent(done.record) == (10, 5, done.sdk_result.total_cost_usd)
        assert ran(calls) == ["slow started", "slow cancelled"]
        assert types(store, "r1", reports=True)[-4:] == [
            "run.cancel_requested", "usage.reported", "tool.outcome_unknown", "run.cancelled",
        ]  # fmt: skip
        assert validates(store, "r1", tmp_path) == 0

    def test_a_model_call_cut_off_by_a_cancel_is_still_a_pair_in_the_log(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """cancel() while the model's answer is still coming: the call reached the API, so
        the log holds its model.started and a model.completed (what it streamed: nothing
        yet), then run.cancelled; every request sent is a pair."""
        store = SQLiteEventStore(tmp_path / "runs.db")

        async def go() -> Any:
            run = ClaudeRun(store, "r1", cancel_poll=0.05)
            task = asyncio.ensure_future(run.arun("think slowly", options(api.url, tmp_path)))
            while model_requests(api) < 1:
                await asyncio.sleep(0.05)
            cancel(SQLiteEventStore(tmp_path / "runs.db"), "r1", reason="took too long")
            return await asyncio.wait_for(task, 60)

        done = drive(go())
        assert (done.status, done.record.cancel_reason) == ("cancelled", "took too long")
        logged = types(store, "r1")
        assert model_requests(api) == logged.count("model.started") == 1
        assert logged.count("model.completed") == 1
        assert not done.record.model_call_open
        assert validates(store, "r1", tmp_path) == 0

    def test_a_guard_stops_the_cli_keeping_the_partial_output(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """MaxTurns(2): the third model call is refused by our gateway before it is sent
        (it never reaches the API); the CLI is interrupted; the run is terminated with the
        last tool result as its partial output; each request sent is a model call logged."""
        store = SQLiteEventStore(tmp_path / "runs.db")
        run = ClaudeRun(store, "r1", guards=[MaxTurns(2)])
        done = drive(run.arun("look twice", options(api.url, tmp_path)))
        assert (done.status, done.stop_reason, done.record.stop_detail) == (
            "terminated",
            "max_turns",
            "2 of 2 turns used",
        )
        assert done.partial_output == "slow done"
        assert ran(calls) == ["slow started", "slow started"]
        assert model_requests(api) == 2
        assert types(store, "r1").count("model.completed") == 2
        assert spent(done.record) == (20, 10, done.sdk_result.total_cost_usd)
        assert validates(store, "r1", tmp_path) == 0

    def test_a_reservation_refuses_the_call_before_it_is_sent(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """reserve_tokens=10 under max_tokens=20: the second call could overspend (15 spent
        + 10 reserved), so it is refused before it reaches the API: one request, one model
        call in the log, with its usage."""
        store = SQLiteEventStore(tmp_path / "runs.db")
        run = ClaudeRun(store, "r1", reserve_tokens=10)
        limits = Limits(max_tokens=20)
        done = drive(run.arun("look twice", options(api.url, tmp_path), limits=limits))
        assert (done.status, done.stop_reason) == ("terminated", "budget")
        assert model_requests(api) == 1
        assert types(store, "r1").count("model.started") == 1
        assert (done.record.usage.input_tokens, done.record.usage.output_tokens) == (10, 5)
        assert ran(calls) == ["slow started"]
        assert validates(store, "r1", tmp_path) == 0

    def test_without_the_gateway_the_guard_judges_a_call_already_sent(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """gateway=False: the refused third call was sent (three requests) and stopped at
        its answer's start: what the gateway saves."""
        store = SQLiteEventStore(tmp_path / "runs.db")
        run = ClaudeRun(store, "r1", guards=[MaxTurns(2)], gateway=False)
        done = drive(run.arun("look twice", options(api.url, tmp_path)))
        assert (done.status, done.stop_reason) == ("terminated", "max_turns")
        assert model_requests(api) == 3
        # The refused call was sent and answered: the CLI counts it, and so does the record.
        assert spent(done.record) == (30, 15, done.sdk_result.total_cost_usd)

    def test_the_sdks_own_max_turns_is_told_in_model_calls_of_the_log(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """`ClaudeAgentOptions(max_turns=1)`: the CLI stops with `error_max_turns`; the run
        is terminated and its detail counts the model calls the log holds."""
        store = SQLiteEventStore(tmp_path / "runs.db")
        opts = replace(options(api.url, tmp_path), max_turns=1)
        done = drive(ClaudeRun(store, "r1").arun("look twice", opts))
        calls_in_log = types(store, "r1").count("model.started")
        assert (done.status, done.stop_reason) == ("terminated", "max_turns")
        plural = "s" if calls_in_log != 1 else ""
        assert done.record.stop_detail == (
            f"the SDK's max_turns=1 stopped the run after {calls_in_log} model call{plural} in the log"
        )
        assert calls_in_log == len(api.requests)
        assert validates(store, "r1", tmp_path) == 0


def spent(record: Any) -> tuple[int, int, float]:
    """The record's tokens and cost, the cost to compare with the CLI's figure (a sum of
    per-leg parts on our side, one total on the CLI's: equal up to the floating point's
    last digits)."""
    u = record.usage
    return (u.input_tokens, u.output_tokens, pytest.approx(u.cost, rel=1e-9, abs=1e-15))


def model_requests(api: FakeAnthropic) -> int:
    """How many of the CLI's model requests (with tools: a turn) reached the API."""
    return sum(1 for body in api.requests if body.get("tools"))


def approve_elsewhere(db: Path, run_id: str, action_id: str) -> None:
    """`agentfsm approve` in a process of its own."""
    argv = ["approve", "--store", str(db), "--approver", "alice", run_id, action_id]
    subprocess.run(
        [sys.executable, "-m", "agentfsm", *argv],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip


class TestRealCLIParallelCalls:
    """One answer asking for several calls: the free ones run at once, one waits."""

    @pytest.mark.parametrize("order", ["rf", "fr"])
    def test_a_free_call_beside_one_needing_approval_runs_once_and_the_other_waits(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path, order: str
    ) -> None:
        """In either order the CLI runs the look-up and keeps the refund deferred; approved
        from another process and resumed in a third, each call ran exactly once."""
        db, config = tmp_path / "runs.db", tmp_path / "claude"
        store = SQLiteEventStore(db)
        run = ClaudeRun(store, "r1", needs_approval={REFUND})
        paused = drive(run.arun(f"batch {order}", options(api.url, config)))
        assert (paused.status, paused.record.pending_approvals) == (
            "waiting_approval",
            ("toolu_r1",),
        )
        assert ran(calls) == ["slow started"]
        assert paused.record.actions["toolu_f1"].result == "slow done"
        approve_elsewhere(db, "r1", "toolu_r1")
        out = resume_elsewhere(db, "r1", api, config, calls)
        assert out == {"status": "completed", "final_output": "slow done | refunded O-1"}
        assert ran(calls) == ["slow started", "refund O-1"]
        assert types(store, "r1").count("tool.started") == 2
        assert validates(store, "r1", tmp_path) == 0

    def test_of_two_calls_needing_approval_one_waits_and_the_other_is_declined_saying_why(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """[refund O-1, refund O-2, look-up]: the CLI holds one deferred call per leg (see
        the next test), so the first waits, the second is declined (the model reads why),
        the look-up runs; a rejection from elsewhere, a resume: nothing ran unapproved."""
        db, config = tmp_path / "runs.db", tmp_path / "claude"
        store = SQLiteEventStore(db)
        run = ClaudeRun(store, "r1", needs_approval={REFUND})
        paused = drive(run.arun("batch rqf", options(api.url, config)))
        assert (paused.status, paused.record.pending_approvals) == (
            "waiting_approval",
            ("toolu_r1",),
        )
        second = paused.record.actions["toolu_r2"]
        assert (second.status, second.approver) == ("rejected", "claude-agent-sdk")
        assert "call 'toolu_r1' of this answer already waits" in (second.reason or "")
        assert ran(calls) == ["slow started"]
        reject(store, "r1", "toolu_r1", approver="bob", reason="over the limit")
        out = resume_elsewhere(db, "r1", api, config, calls)
        assert out["status"] == "completed"
        said = out["final_output"].split(" | ")  # the CLI's order: the declined call first
        assert len(said) == 3
        assert "slow done" in said
        assert any("already waits" in s for s in said)
        assert any("over the limit" in s for s in said)
        assert ran(calls) == ["slow started"]
        assert validates(store, "r1", tmp_path) == 0

    def test_the_cli_keeps_only_the_last_of_two_deferred_calls(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """What the adapter is built on: deferring two calls of one answer, the CLI keeps
        the last and drops the first from the conversation (the model never reads a result
        for it). A CLI that keeps both fails this test: then both may wait."""
        from claude_agent_sdk import (
            ClaudeSDKClient,
            HookMatcher,
            PermissionResultAllow,
            ResultMessage,
        )

        async def defer_refunds(data: Any, tool_use_id: str | None, context: Any) -> Any:
            if data.get("tool_name") != REFUND:
                return {}
            out = {"hookEventName": "PreToolUse", "permissionDecision": "defer"}
            return {"hookSpecificOutput": out}

        async def allow(name: str, arguments: Any, context: Any) -> Any:
            return PermissionResultAllow()

        async def go(resume: str | None) -> Any:
            opts = replace(options(api.url, tmp_path / "claude"), resume=resume, can_use_tool=allow)
            if resume is None:
                opts = replace(opts, hooks={"PreToolUse": [HookMatcher(hooks=[defer_refunds])]})
            async with ClaudeSDKClient(opts) as client:
                if resume is None:
                    await client.query("batch rqf")
                async for message in client.receive_response():
                    if isinstance(message, ResultMessage):
                        return message
            return None

        first = drive(go(None))
        assert (first.stop_reason, first.deferred_tool_use.id) == ("tool_deferred", "toolu_r2")
        drive(go(first.session_id))
        assert ran(calls) == ["slow started", "refund O-2"]
        resumed = json.dumps(api.requests[-1]["messages"])
        assert "toolu_r2" in resumed
        assert "toolu_r1" not in resumed


class TestRealCLISubagents:
    """Subagents over the real CLI: ours pause their caller; the CLI's own cannot."""

    def test_a_subagent_waiting_for_approval_pauses_its_caller_until_driven_on(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """The child's CLI defers its refund; the caller's CLI defers the call waiting on
        it; approve() in the child's run; resuming the caller resumes both sessions."""
        store = SQLiteEventStore(tmp_path / "runs.db")
        opts = options(api.url, tmp_path / "claude")

        def caller() -> ClaudeRun:
            refunds = Subagent("Refunds orders.", opts)
            return ClaudeRun(store, "m1", needs_approval={REFUND}, subagents={"refunds": refunds})

        paused = drive(caller().arun("ask the refunds agent", opts))
        assert (paused.status, [p.run_id for p in paused.pending_approvals]) == (
            "waiting_tool",
            ["m1/toolu_m1"],
        )
        assert store.load("m1/toolu_m1").pending_approvals == ("toolu_r1",)
        assert ran(calls) == []
        approve(store, "m1/toolu_m1", "toolu_r1", approver="alice")
        done = drive(caller().adrive(opts))
        assert (done.status, done.final_output) == ("completed", "The agent said: Refunded.")
        assert ran(calls) == ["refund O-1"]
        assert store.load("m1/toolu_m1").final_output == "Refunded."
        assert done.record.actions["toolu_m1"].result == "Refunded."
        assert validates(store, "m1", tmp_path) == 0
        assert validates(store, "m1/toolu_m1", tmp_path) == 0

    def test_a_call_needing_approval_inside_the_clis_own_subagent_is_refused(
        self, tmp_path: Path, api: FakeAnthropic, calls: Path
    ) -> None:
        """The CLI's `Agent` tool: a deferred call would end the subagent and the caller go
        on, so the adapter refuses the call instead; it never runs."""
        store = SQLiteEventStore(tmp_path / "runs.db")
        opts = replace(options(api.url, tmp_path), tools=["Agent"])
        run = ClaudeRun(store, "r1", needs_approval={REFUND})
        done = drive(run.arun("ask the cli's agent", opts))
        assert (done.status, done.final_output) == ("completed", "Done.")
        assert ran(calls) == []
        refused = json.dumps(api.requests)
        assert "the CLI cannot pause inside its own subagents" in refused
        assert validates(store, "r1", tmp_path) == 0
