"""Time travel: fork a run at any sequence, drive the fork another way, compare the two.

The properties hold for every legal log the table generates and every point in it: the
fork's first N events are the source's (types and payloads), its fold at N is the source's,
and `diff_runs` says they part at N + 1; a point where the run cannot go on is refused with
nothing written. The rest drives forks on with the real Runner and the real command line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm import (
    Agent,
    Decision,
    MemoryEventStore,
    ProposedCall,
    Runner,
    ScriptedModel,
    SQLiteEventStore,
    StoreOptions,
    Tool,
    approve,
    reject,
    replay,
)
from agentfsm.errors import EventFormatError, ForkError, LifecycleError, RunNotFoundError
from agentfsm.events import LogBuilder, event_to_dict
from agentfsm.events.models import Event
from agentfsm.record import RunRecord
from agentfsm.reducers.diff import diff_runs
from agentfsm.runtime import ToolPolicy, control
from agentfsm.testing import legal_runs
from tests._cli_helpers import run_script, waiting_events

KEY = b"a test key of thirty-two bytes!!"


def content(event: Event) -> dict[str, Any]:
    """What an event says, without where (its run) and when."""
    data = event_to_dict(event)
    for key in ("run_id", "occurred_at", "event_id"):
        data.pop(key, None)
    return data


def same_record(fork: RunRecord, source: RunRecord) -> dict[str, Any]:
    """The fork's record as JSON, made comparable with its source's: the run id and the
    default idempotency keys (which name the run) set to the source's."""
    data = fork.to_json()
    data["run_id"] = source.run_id
    for action_id, action in data["actions"].items():
        if action["idempotency_key"] == f"{fork.run_id}:{action_id}":
            action["idempotency_key"] = f"{source.run_id}:{action_id}"
    return data


def stored(events: list[Event]) -> MemoryEventStore:
    store = MemoryEventStore()
    store.append(events[0].run_id, events, 0)
    return store


@settings(max_examples=200, deadline=None)
@given(legal_runs(), st.data())
def test_a_fork_holds_its_source_up_to_n_and_parts_from_it_right_after(
    events: list[Event], data: st.DataObject
) -> None:
    """For any legal log and any N: the fork's first N events and its fold at N are the
    source's, then `run.forked`; `diff` says they part at N + 1. Where the run cannot go on
    (ended, a call in flight) the fork is refused and nothing is written."""
    source = events[0].run_id
    store = stored(events)
    at = data.draw(st.integers(1, len(events)), label="at")
    at_n = replay(events[:at])
    started = [a for a in at_n.in_flight if at_n.actions[a].status == "started"]
    if at_n.status in store.reducer.table.terminal_states or started:
        with pytest.raises(ForkError) as info:
            control.fork(store, source, at=at, as_run="the-fork")
        assert (info.value.run_id, info.value.sequence, info.value.state) == (
            source, at, at_n.status
        )  # fmt: skip
        with pytest.raises(RunNotFoundError):
            store.run_info("the-fork")
        return
    fork = control.fork(store, source, at=at, as_run="the-fork", by="ann", reason="why")
    forked = list(store.events("the-fork"))
    assert [content(e) for e in forked[:at]] == [content(e) for e in events[:at]]
    assert all(e.run_id == "the-fork" for e in forked)
    assert [e.type for e in forked[at:]] == ["run.forked"]
    assert same_record(replay(forked[:at]), at_n) == at_n.to_json()
    assert (fork.status, fork.forked_from, fork.forked_at) == (at_n.status, source, at)
    assert list(store.events(source)) == events  # the source is only read
    assert diff_runs(events, forked).diverges_at == at + 1


@settings(max_examples=100, deadline=None)
@given(legal_runs(), st.data())
def test_a_fork_of_a_fork_names_its_latest_source_and_keeps_the_lineage(
    events: list[Event], data: st.DataObject
) -> None:
    """Fork at N, then fork the fork at M: the second holds the first's `run.forked` when
    M passes it, and its record names the first fork."""
    store = stored(events)
    source = events[0].run_id
    at = data.draw(st.integers(1, len(events)), label="at")
    try:
        control.fork(store, source, at=at, as_run="f1")
    except ForkError:
        return
    again = data.draw(st.integers(1, at + 1), label="again")
    second = control.fork(store, "f1", at=again, as_run="f2")
    assert (second.forked_from, second.forked_at) == ("f1", again)
    marks = [e for e in store.events("f2") if e.type == "run.forked"]
    assert [(e.from_run, e.from_sequence) for e in marks] == (
        [(source, at), ("f1", again)] if again == at + 1 else [("f1", again)]
    )


class TestRefusals:
    """Nothing is written for a fork that cannot be taken, and each says why."""

    def test_a_run_that_has_ended_is_forked_before_its_end(self) -> None:
        log = LogBuilder("r1")
        log.add("run.started")
        log.add("model.started")
        log.add("model.completed", decision="final", output="done")
        log.add("run.completed")
        store = stored(log.events)
        with pytest.raises(ForkError) as info:
            control.fork(store, "r1", at=4, as_run="f1")
        assert str(info.value) == (
            "run 'r1' cannot be forked at sequence 4 (it is 'completed' there): the run has "
            "ended there; fork it before the event that ended it (sequence 4) to try another "
            "way"
        )
        assert control.fork(store, "r1", at=3, as_run="f1").status == "running"

    def test_a_call_in_flight_is_refused_naming_it(self) -> None:
        log = LogBuilder("r1")
        log.add("run.started")
        log.add("model.started")
        log.add("model.completed", decision="tool_calls",
                tool_calls=[{"action_id": "t1", "tool": "lookup", "arguments": {}}])  # fmt: skip
        log.add("tool.requested", action_id="t1", tool="lookup", arguments={})
        log.add("tool.started", action_id="t1")
        log.add("tool.completed", action_id="t1", result={"ok": True})
        store = stored(log.events)
        with pytest.raises(ForkError, match="call 't1' started and has no outcome yet"):
            control.fork(store, "r1", at=5, as_run="f1")
        # Requested and not started: the fork makes the call itself, under its own key.
        assert control.fork(store, "r1", at=4, as_run="f1").actions["t1"].status == "requested"
        assert control.fork(store, "r1", at=6, as_run="f2").actions["t1"].status == "succeeded"

    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"at": 0, "as_run": "f"}, "run 'r1' has 4 events: fork it at a sequence from 1 to 4, not 0"),
            ({"at": 5, "as_run": "f"}, "run 'r1' has 4 events: fork it at a sequence from 1 to 4, not 5"),
            ({"at": 2, "as_run": "r1"}, "a fork of run 'r1' needs another run id than its own"),
            ({"at": 2, "as_run": "old"}, "run 'old' exists already: a fork is a new run"),
        ],
    )  # fmt: skip
    def test_bad_arguments(self, kwargs: dict[str, Any], message: str) -> None:
        store = stored(waiting_events("r1"))
        store.append("old", waiting_events("old"), 0)
        with pytest.raises(ValueError, match="fork") as info:
            control.fork(store, "r1", **kwargs)
        assert str(info.value) == message
        assert [r.run_id for r in store.runs()] == ["old", "r1"]

    def test_an_unknown_source_and_an_empty_reason(self) -> None:
        store = stored(waiting_events("r1"))
        with pytest.raises(RunNotFoundError):
            control.fork(store, "nope", at=1, as_run="f")
        with pytest.raises(EventFormatError, match="reason"):
            control.fork(store, "r1", at=1, as_run="f", reason="")
        with pytest.raises(RunNotFoundError):
            store.run_info("f")

    def test_run_forked_is_written_by_fork_only(self) -> None:
        """`append_event` refuses it (it vouches for the events before it), and the reducer
        refuses one naming the run itself or in a run that ended."""
        store = stored(waiting_events("r1"))
        with pytest.raises(EventFormatError, match=r"'run\.forked' is written by"):
            control.append_event(store, "r1", "run.forked", from_run="x", from_sequence=1)
        log = LogBuilder("r1")
        log.add("run.started")
        log.add("run.forked", from_run="r1", from_sequence=1)
        with pytest.raises(LifecycleError, match="names the run itself as its source"):
            replay(log.events)
        done = LogBuilder("r2")
        done.add("run.started")
        done.add("run.completed")
        done.add("run.forked", from_run="r1", from_sequence=1)
        with pytest.raises(LifecycleError, match="is not allowed"):
            replay(done.events)


def _agent(answer: str, *, approval: bool = True) -> Agent:
    model = ScriptedModel([
        Decision.call_tools(ProposedCall("refund", {"order_id": 7})),
        lambda ctx: Decision.answer(f"{answer}: {ctx.results[0].status}"),
    ], by_turn=True)  # fmt: skip
    refund = Tool("refund", lambda ctx: {"refunded": 7}, idempotent=True)
    return Agent("orders", model, [refund],
                 policy=ToolPolicy(approval={"refund"} if approval else set()))  # fmt: skip


class TestDrivenOn:
    """A fork is a run like any other: steer it, drive it, and compare it with its source."""

    def test_reject_in_the_fork_what_the_source_approved(self, tmp_path: Path) -> None:
        """The source approved the refund and completed; the fork, taken at the approval
        request, rejects it and the model answers otherwise. The source does not move, and
        both verify under the store's key."""
        path = tmp_path / "runs.db"
        with SQLiteEventStore(path, options=StoreOptions(integrity_key=KEY)) as store:
            agent = _agent("done")
            waiting = Runner(store, agent).run("r1", "refund order 7")
            assert waiting.status == "waiting_approval"
            at = store.run_info("r1").version
            approve(store, "r1", "t1.1", approver="ann")
            source = Runner(store, agent).drive("r1")
            assert source.final_output == "done: succeeded"
            before = list(store.events("r1"))
            control.fork(store, "r1", at=at, as_run="r1-no", by="bob", reason="try a no")
            reject(store, "r1-no", "t1.1", approver="bob", reason="not this one")
            fork = Runner(store, agent).drive("r1-no")
            assert fork.final_output == "done: rejected"
            assert list(store.events("r1")) == before
            assert [store.verify(r).ok for r in ("r1", "r1-no")] == [True, True]
            found = diff_runs(store.events("r1"), store.events("r1-no"), reducer=store.reducer)
        assert found.diverges_at == at + 1
        assert found.differences["actions.t1.1.status"] == ("succeeded", "rejected")
        assert found.differences["final_output"] == ("done: succeeded", "done: rejected")
        assert found.differences["forked_from"] == (None, "r1")
        assert [e.type for e in found.a.events][:1] == ["approval.accepted"]
        assert [e.type for e in found.b.events][:2] == ["run.forked", "approval.rejected"]

    def test_another_model_drives_the_fork_from_its_start(self) -> None:
        """Fork right after `run.started` and drive with another agent: the runs part at 2,
        and the fork's call is its own (its idempotency key names the fork)."""
        store = MemoryEventStore()
        Runner(store, _agent("first", approval=False)).run("r1", "refund order 7")
        control.fork(store, "r1", at=1, as_run="r2")
        second = Runner(store, _agent("second", approval=False)).drive("r2")
        assert second.final_output == "second: succeeded"
        found = diff_runs(store.events("r1"), store.events("r2"))
        assert found.diverges_at == 2
        assert store.load("r2").actions["t1.1"].idempotency_key == "r2:t1.1"
        assert found.differences["final_output"] == ("first: succeeded", "second: succeeded")
        assert "actions.t1.1.idempotency_key" not in found.differences


class TestDiff:
    def test_the_same_log_twice_has_no_difference(self) -> None:
        events = waiting_events("r1")
        found = diff_runs(events, events)
        assert (found.diverges_at, found.fields, found.a.events, found.b.events) == (
            None, (), (), ()
        )  # fmt: skip

    def test_a_log_that_ends_first_parts_where_it_ends(self) -> None:
        events = waiting_events("r1")
        found = diff_runs(events[:2], events)
        assert found.diverges_at == 3
        assert [e.sequence for e in found.b.events] == [3, 4]
        assert found.a.events == ()

    def test_the_events_kept_are_bounded(self) -> None:
        events = waiting_events("r1")
        found = diff_runs(events[:1], events, limit=1)
        assert ([e.sequence for e in found.b.events], found.b.more) == ([2], 2)
        with pytest.raises(ValueError, match="limit must be at least 0"):
            diff_runs(events, events, limit=-1)

    def test_its_json_names_each_side(self) -> None:
        store = stored(waiting_events("r1"))
        control.fork(store, "r1", at=4, as_run="f1")
        reject(store, "f1", "a1", approver="bob")
        shown = diff_runs(store.events("r1"), store.events("f1")).to_json()
        assert shown["diverges_at"] == 5
        assert shown["a"]["events"] == []
        assert [e["type"] for e in shown["b"]["events"]] == ["run.forked", "approval.rejected"]
        assert shown["a"]["record"]["actions.a1.status"] == "approval_pending"
        assert shown["b"]["record"]["actions.a1.status"] == "rejected"
        assert set(shown["a"]["record"]) == set(shown["fields"]) == set(shown["b"]["record"])
        json.dumps(shown)


class TestCommandLine:
    """`agentfsm fork` and `agentfsm diff`, as a user runs them."""

    def store(self, tmp_path: Path) -> Path:
        path = tmp_path / "runs.db"
        with SQLiteEventStore(path) as store:
            store.append("r1", waiting_events("r1"), 0)
        return path

    def test_fork_then_diff(self, tmp_path: Path) -> None:
        path = str(self.store(tmp_path))
        assert (
            run_script("approve", "r1", "a1", "--approver", "ann", "--store", path).returncode == 0
        )
        forked = run_script("fork", "r1", "--at", "4", "--as", "f1", "--by", "ann",
                            "--reason", "say no instead", "--store", path)  # fmt: skip
        assert (forked.returncode, forked.stdout, forked.stderr) == (
            0, "run f1: waiting_approval (version 5), forked from r1 at sequence 4\n", ""
        )  # fmt: skip
        no = run_script("reject", "f1", "a1", "--approver", "bob", "--store", path)
        assert no.returncode == 0
        text = run_script("diff", "r1", "f1", "--store", path)
        assert text.returncode == 0, text.stderr
        lines = text.stdout.splitlines()
        assert lines[0] == "runs r1 and f1 part at sequence 5"
        assert '  actions.a1.status: "approved" | "rejected"' in lines
        assert '  forked_from: null | "r1"' in lines
        as_json = run_script("diff", "r1", "f1", "--store", path, "--json", "--limit", "1")
        shown = json.loads(as_json.stdout)
        assert (shown["diverges_at"], len(shown["b"]["events"]), shown["b"]["more"]) == (5, 1, 1)

    @pytest.mark.parametrize(
        ("argv", "code", "message"),
        [
            (["fork", "r1", "--at", "9", "--as", "f"], 2,
             "agentfsm fork: run 'r1' has 4 events: fork it at a sequence from 1 to 4, not 9\n"),
            (["fork", "r1", "--at", "x", "--as", "f"], 2, None),
            (["fork", "nope", "--at", "1", "--as", "f"], 2, None),
            (["diff", "r1", "nope"], 2, None),
            (["append", "r1", "run.forked", "from_run=x", "from_sequence:=1"], 2, None),
        ],
    )  # fmt: skip
    def test_refusals_are_one_line(
        self, tmp_path: Path, argv: list[str], code: int, message: str | None
    ) -> None:
        path = str(self.store(tmp_path))
        result = run_script(*argv, "--store", path)
        assert result.returncode == code
        assert len(result.stderr.splitlines()) == 1
        assert "Traceback" not in result.stderr
        if message is not None:
            assert result.stderr == message

    def test_an_ended_run_is_refused_with_exit_1(self, tmp_path: Path) -> None:
        path = tmp_path / "runs.db"
        log = LogBuilder("r1")
        log.add("run.started")
        log.add("run.cancel_requested")
        log.add("run.cancelled")
        with SQLiteEventStore(path) as store:
            store.append("r1", log.events, 0)
        result = run_script("fork", "r1", "--at", "3", "--as", "f", "--store", str(path))
        assert (result.returncode, result.stdout) == (1, "")
        assert result.stderr.startswith("agentfsm fork: refused: run 'r1' cannot be forked")


def test_the_runtime_pages_fork_example_prints_its_output() -> None:
    """docs/runtime.md's time-travel block, executed, prints the text block after it."""
    import contextlib
    import io
    import re

    text = (Path(__file__).resolve().parents[1] / "docs" / "runtime.md").read_text()
    section = text[text.index("## Time travel") :]
    found = re.search(r"```python\n(.*?)```\n\n```text\n(.*?)```", section, re.S)
    assert found is not None
    code, output = found.groups()
    printed = io.StringIO()
    with structlog.testing.capture_logs(), contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/runtime.md", "exec"), {"__name__": "docs_example"})
    assert printed.getvalue() == output
