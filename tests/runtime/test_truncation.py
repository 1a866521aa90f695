"""Truncation cannot re-run a paid call unnoticed: the attack, with and without an anchor.

The attack (reported against main): a payment approved and charged; then someone who can
write the SQLite file deletes the rows after `approval.accepted` and moves the runs row to
match. `verify` said ok, and `Runner.drive` charged a second time: a chain proves every
row it holds, not that rows are missing from its end. An external anchor (the head of every
run, kept where the attacker cannot write) is what notices.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentfsm.errors import TruncatedLogError
from agentfsm.events import parse_event
from agentfsm.reducers.reduce import replay
from agentfsm.runtime import (
    Decision,
    ProposedCall,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolPolicy,
    approve,
)
from agentfsm.stores import SQLiteEventStore, StoreOptions
from tests._cli_helpers import run_script

from .helpers import runner_for

Charged = list[tuple[str, int]]


def _runner(store: Any, charged: Charged) -> Any:
    def charge(ctx: ToolContext) -> Any:
        charged.append((ctx.idempotency_key, ctx.args["amount"]))
        return {"charged": ctx.args["amount"]}

    model = ScriptedModel(
        [Decision.call_tools(ProposedCall("charge", {"amount": 1_000})), Decision.answer("paid")],
        by_turn=True,
    )
    return runner_for(
        store, model, [Tool("charge", charge)], policy=ToolPolicy(approval={"charge"})
    )


def _paid(path: Path, options: StoreOptions, charged: Charged) -> None:
    """Run `pay` to its approval, approve it, resume: the charge is made once."""
    with SQLiteEventStore(path, options=options) as store:
        assert _runner(store, charged).run("pay").status == "waiting_approval"
        approve(store, "pay", "t1.1", "ann")
        assert _runner(store, charged).drive("pay").status == "completed"
    assert charged == [("pay:t1.1", 1_000)]


def truncate_after_approval(path: Path) -> int:
    """The attacker's edit: delete every row after `approval.accepted`, and set the runs row
    to what the rows left fold to (they know the format). Returns the version left."""
    with sqlite3.connect(path) as conn:
        rows = conn.execute(
            "SELECT sequence, type, data FROM agentfsm_events WHERE run_id = 'pay' "
            "ORDER BY sequence"
        ).fetchall()
        cut = next(seq for seq, type_, _ in rows if type_ == "approval.accepted")
        record = replay([parse_event(data) for seq, _, data in rows if seq <= cut])
        conn.execute("DELETE FROM agentfsm_events WHERE run_id = 'pay' AND sequence > ?", (cut,))
        conn.execute("DELETE FROM agentfsm_snapshots WHERE run_id = 'pay'")
        conn.execute(
            "UPDATE agentfsm_runs SET version = ?, status = ?, updated_at = ? WHERE run_id = 'pay'",
            (cut, record.status, record.updated_at),
        )
    conn.close()
    return cut


class TestWithoutAnAnchor:
    """The documented limit: nothing in the store can tell, so the call's idempotency key
    (passed to the payment service) is the defence: both charges carry the same key."""

    def test_a_truncated_log_repeats_the_call_with_the_same_key(self, tmp_path: Path) -> None:
        """verify says ok, and the resume charges again, under the same idempotency key."""
        path, charged = tmp_path / "runs.db", []
        _paid(path, StoreOptions(), charged)
        truncate_after_approval(path)
        with SQLiteEventStore(path) as store:
            assert store.verify("pay").ok
            assert _runner(store, charged).drive("pay").status == "completed"
        assert charged == [("pay:t1.1", 1_000), ("pay:t1.1", 1_000)]


class TestWithAnAnchor:
    """A store given an anchor (`StoreOptions(anchor=FILE)`) writes each run's head there
    after every commit, and refuses a run whose log is shorter than its anchor."""

    def test_the_runner_refuses_a_truncated_run(self, tmp_path: Path) -> None:
        """The resume raises `TruncatedLogError` naming where the log now ends; nothing is
        charged a second time, and `verify` reports the truncation."""
        path, anchor, charged = tmp_path / "runs.db", tmp_path / "anchor.db", []
        _paid(path, StoreOptions(anchor=anchor), charged)
        cut = truncate_after_approval(path)
        with SQLiteEventStore(path, options=StoreOptions(anchor=anchor)) as store:
            head = store.options.anchor.get("pay")
            with pytest.raises(TruncatedLogError) as info:
                _runner(store, charged).drive("pay")
            report = store.verify("pay")
        expected = (
            f"the log ends at version {cut}, but the anchor records version {head.version}: "
            "events were removed from the store"
        )
        assert (info.value.run_id, info.value.sequence, str(info.value)) == (
            "pay",
            cut + 1,
            f"run 'pay', sequence {cut + 1}: {expected}",
        )
        assert (report.ok, report.sequence, report.problem) == (False, cut + 1, expected)
        assert charged == [("pay:t1.1", 1_000)]

    def test_verify_with_an_anchor_file_reports_the_truncation(self, tmp_path: Path) -> None:
        """`agentfsm verify --anchor FILE`: the first run writes the heads, a later one
        compares them (exit 1 naming the run, where its log ends and the anchored length)."""
        path, anchor, charged = tmp_path / "runs.db", tmp_path / "heads.db", []
        _paid(path, StoreOptions(), charged)
        with SQLiteEventStore(path) as store:
            version = store.run_info("pay").version
        first = run_script("verify", "--store", str(path), "--anchor", str(anchor))
        assert (first.returncode, first.stdout, first.stderr) == (
            0,
            f"ok: 1 run, {version} events, every hash chain intact\n"
            f"anchor '{anchor}': 1 run recorded\n",
            "",
        )
        cut = truncate_after_approval(path)
        later = run_script("verify", "--store", str(path), "--anchor", str(anchor))
        assert (later.returncode, later.stdout, later.stderr) == (
            1,
            f"run 'pay', sequence {cut + 1}: the log ends at version {cut}, but the anchor "
            f"records version {version}: events were removed from the store\n"
            "1 of 1 run has findings\n"
            f"anchor '{anchor}': 0 runs recorded\n",
            "",
        )
