"""Attacks on a payment run: what an approver decided is what runs, and nothing else.

Each test reproduces an attack an independent review carried out against main, then
checks the side effect never happens.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from agentfsm.errors import ActionError
from agentfsm.events import Limits, Usage, call_digest
from agentfsm.runtime import (
    Decision,
    ProposedCall,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolPolicy,
    approve,
    reject,
)
from agentfsm.stores import MemoryEventStore, SQLiteEventStore, StoreOptions
from agentfsm.stores._integrity import PLAIN
from agentfsm.testing._stores.tamper import KEY

from .helpers import runner_for, validate


def _payment_runner(store: Any, amount: int, charged: list[tuple[str, int]]) -> Any:
    def charge(ctx: ToolContext) -> Any:
        charged.append((ctx.idempotency_key, ctx.args["amount"]))
        return {"charged": ctx.args["amount"]}

    model = ScriptedModel(
        [Decision.call_tools(ProposedCall("charge", {"amount": amount})), Decision.answer("paid")]
    )
    tools = [Tool("charge", charge)]
    return runner_for(store, model, tools, policy=ToolPolicy(approval={"charge"}))


class TestApprovalBinding:
    """Runner action ids repeat across runs (`t1.1` in every run): a decision names its call."""

    def test_approve_writes_the_digest_of_the_call_it_approves(self) -> None:
        """`approve` binds `approval.accepted` to the waiting call's tool and arguments."""
        store, charged = MemoryEventStore(), []
        _payment_runner(store, 1, charged).run("a")
        approve(store, "a", "t1.1", "ann")
        decision = list(store.events("a"))[-1]
        assert decision.type == "approval.accepted"
        assert decision.arguments_digest == call_digest("charge", {"amount": 1})

    def test_an_approval_restamped_onto_another_run_does_not_run_its_charge(self) -> None:
        """Run A's approval of `t1.1` (amount 1), copied onto run B's `t1.1` (amount
        1,000,000) by someone who can append to the store: refused, and B charges nothing."""
        store, charged = MemoryEventStore(), []
        runner_a = _payment_runner(store, 1, charged)
        runner_a.run("a")
        runner_b = _payment_runner(store, 1_000_000, charged)
        runner_b.run("b")
        approve(store, "a", "t1.1", "ann")
        stolen = list(store.events("a"))[-1]
        b = store.load("b")
        forged = stolen.model_copy(update={"run_id": "b", "sequence": b.version + 1})
        with pytest.raises(ActionError) as info:
            store.append("b", [forged], b.version)
        assert str(info.value).endswith(
            f"the decision is for call {call_digest('charge', {'amount': 1})}, but the call "
            f"waiting is {call_digest('charge', {'amount': 1_000_000})} (tool 'charge')"
        )
        assert runner_b.drive("b").status == "waiting_approval"
        assert runner_a.drive("a").status == "completed"
        assert charged == [("a:t1.1", 1)]
        assert validate(store, ["a", "b"]).ok

    def test_a_pinned_digest_of_another_call_approves_nothing(self) -> None:
        """An approver who reviewed A's call and approves B's `t1.1` with that digest is
        refused; nothing is appended."""
        store, charged = MemoryEventStore(), []
        _payment_runner(store, 1_000_000, charged).run("b")
        before = store.load("b").version
        reviewed = call_digest("charge", {"amount": 1})
        with pytest.raises(ActionError):
            approve(store, "b", "t1.1", "ann", digest=reviewed)
        with pytest.raises(ActionError):
            reject(store, "b", "t1.1", "ann", "no", digest=reviewed)
        assert store.load("b").version == before
        assert charged == []

    def test_a_pinned_digest_of_the_call_approves_it(self) -> None:
        """The digest the approver reviewed, when it is the waiting call's, approves it."""
        store, charged = MemoryEventStore(), []
        runner = _payment_runner(store, 7, charged)
        runner.run("c")
        approve(store, "c", "t1.1", "ann", digest=call_digest("charge", {"amount": 7}))
        assert runner.drive("c").status == "completed"
        assert charged == [("c:t1.1", 7)]


class TestForgedSnapshot:
    """The reported attack: only the snapshot row of a SQLite store edited (the pending call
    marked approved, the run running, limits removed; `event_hash` left as it was)."""

    def _forge(self, path: Path, run_id: str, *, reseal: bool) -> None:
        with sqlite3.connect(path) as conn:
            event_hash, data, digest = conn.execute(
                "SELECT event_hash, data, digest FROM agentfsm_snapshots WHERE run_id = ?",
                (run_id,),
            ).fetchone()
            snapshot = json.loads(data)
            record = snapshot["record"]
            record.update(status="running", limits=None, pending_approvals=[])
            record["actions"]["t1.1"].update(status="approved", approver="mallory")
            forged = json.dumps(snapshot)
            if reseal:  # an attacker who knows the (public) unkeyed digest recomputes it
                digest = PLAIN.seal(event_hash, forged)
            conn.execute(
                "UPDATE agentfsm_snapshots SET data = ?, digest = ? WHERE run_id = ?",
                (forged, digest, run_id),
            )
        conn.close()

    def _waiting_run(self, path: Path, charged: list[tuple[str, int]], key: bytes | None) -> Any:
        store = SQLiteEventStore(path, options=StoreOptions(snapshot_every=1, integrity_key=key))
        runner = _payment_runner(store, 1_000_000, charged)
        assert runner.run("pay", limits=Limits(max_turns=2)).status == "waiting_approval"
        store.close()

    def _resume(self, path: Path, charged: list[tuple[str, int]], key: bytes | None) -> Any:
        store = SQLiteEventStore(path, options=StoreOptions(snapshot_every=1, integrity_key=key))
        try:
            return _payment_runner(store, 1_000_000, charged).drive("pay")
        finally:
            store.close()

    def test_an_edited_snapshot_does_not_run_the_unapproved_call(self, tmp_path: Path) -> None:
        """The forged snapshot is ignored (logged), the run replayed: it still waits, and
        nothing is charged; `verify` reports the snapshot."""
        charged: list[tuple[str, int]] = []
        path = tmp_path / "runs.db"
        self._waiting_run(path, charged, None)
        self._forge(path, "pay", reseal=False)
        with capture_logs() as logs:
            result = self._resume(path, charged, None)
        assert result.status == "waiting_approval"
        assert charged == []
        assert [e["reason"] for e in logs if e["event"] == "store.snapshot_ignored"][:1] == [
            "its digest does not match its content: it was changed after it was written"
        ]
        with SQLiteEventStore(path) as store:
            report = store.verify("pay")
        assert (report.ok, report.sequence) == (False, 4)

    def test_with_a_key_a_resealed_snapshot_is_ignored_too(self, tmp_path: Path) -> None:
        """With an integrity key, even a digest recomputed by the attacker does not make
        the snapshot trusted: nothing is charged."""
        charged: list[tuple[str, int]] = []
        path = tmp_path / "runs.db"
        self._waiting_run(path, charged, KEY)
        self._forge(path, "pay", reseal=True)
        result = self._resume(path, charged, KEY)
        assert result.status == "waiting_approval"
        assert charged == []

    def test_without_a_key_verify_catches_a_resealed_snapshot(self, tmp_path: Path) -> None:
        """Without a key a resealed snapshot is trusted by a load (the documented limit of
        keyless integrity), and `verify` finds it by folding the events it covers."""
        charged: list[tuple[str, int]] = []
        path = tmp_path / "runs.db"
        self._waiting_run(path, charged, None)
        self._forge(path, "pay", reseal=True)
        with SQLiteEventStore(path) as store:
            report = store.verify("pay")
        assert (report.ok, report.sequence, report.problem) == (
            False,
            4,
            "the snapshot does not hold what the events it covers fold into (it differs in "
            "status, limits, actions): it was changed, or taken under another table",
        )


class TestUnstorableValues:
    """A tool result or a model answer no log can hold, after the side effect or the call:
    recorded as what it is, never raised out of the Runner, never poisoning the run."""

    def _run(self, model: ScriptedModel, result: Any) -> tuple[Any, list[Any], list[int]]:
        store, ran = MemoryEventStore(), []

        def lookup(ctx: ToolContext) -> Any:
            ran.append(1)
            return result

        runner = runner_for(store, model, [Tool("lookup", lookup)])
        outcome = runner.run("r1")
        assert runner.drive("r1").status == outcome.status  # resuming asks nothing again
        assert validate(store, ["r1"]).ok
        return outcome, list(store.events("r1")), ran

    @pytest.mark.parametrize(
        ("result", "why"),
        [
            (float("nan"), "the value is nan, which JSON cannot hold (numbers must be finite)"),
            ({"s": "\ud800"}, "the value at 's' is not valid Unicode (a lone surrogate "
             "'\\ud800' at index 0)"),
            ({"n": 10**5000}, "the value at 'n' is an integer of more than 4,000 digits"),
        ],
    )  # fmt: skip
    def test_a_tool_result_that_cannot_be_stored_is_a_failed_call(
        self, result: Any, why: str
    ) -> None:
        """The tool ran once; its result is refused with the reason, and the run goes on to
        the model's next answer."""
        model = ScriptedModel(
            [
                Decision.call_tools(ProposedCall("lookup", {"q": "x"})),
                lambda ctx: Decision.answer(ctx.results[0].status),
            ]
        )
        outcome, events, ran = self._run(model, result)
        assert (outcome.status, outcome.final_output, ran) == ("completed", "failed", [1])
        failed = next(e for e in events if e.type == "tool.failed")
        assert (failed.error.kind, failed.error.message, failed.error.retryable) == (
            "unstorable_result",
            f"the tool ran, but its result cannot be stored: {why}",
            False,
        )

    def test_a_result_over_the_size_limit_is_a_failed_call(self) -> None:
        """A result too large for one event is refused before it is appended."""
        from agentfsm.events._bounds import MAX_EVENT_BYTES

        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("lookup", {"q": "x"})), Decision.answer("done")]
        )
        outcome, events, _ = self._run(model, "x" * MAX_EVENT_BYTES)
        failed = next(e for e in events if e.type == "tool.failed")
        assert outcome.status == "completed"
        assert failed.error.message.startswith(
            "the tool ran, but its result cannot be stored: the value is 8,388,"
        )

    @pytest.mark.parametrize(
        "decision",
        [
            Decision.answer(float("nan"), usage=Usage(input_tokens=7, output_tokens=3)),
            Decision.call_tools(
                ProposedCall("lookup", {"q": float("inf")}),
                usage=Usage(input_tokens=7, output_tokens=3),
            ),
        ],
        ids=["nan-output", "infinite-argument"],
    )
    def test_a_model_answer_that_cannot_be_stored_fails_the_run_once(
        self, decision: Decision
    ) -> None:
        """The answer's usage is kept, the run fails saying why, and a resume does not ask
        the model again (it used to crash on every resume)."""
        model = ScriptedModel([decision])
        outcome, events, ran = self._run(model, None)
        assert (outcome.status, ran, model.calls) == ("failed", [], 1)
        assert [e.type for e in events][-2:] == ["model.completed", "run.failed"]
        assert events[-2].usage == Usage(input_tokens=7, output_tokens=3)
        assert events[-1].error.message.startswith("the model's decision is not JSON: ")
