"""The guard protocol: edges name guards, the reducer runs them, verdicts stop runs."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import attrs
import pytest

from agentfsm import DEFAULT_TABLE, Event, RunRecord
from agentfsm.errors import InvalidTableError
from agentfsm.guards import (
    Deadline,
    GuardContext,
    LoopDetector,
    MaxTurns,
    Verdict,
    all_of,
    any_of,
    attach_guard,
)
from agentfsm.names import StopReason
from agentfsm.reducers import DEFAULT_REDUCER, Reducer
from tests.guardlogs import T0, fold, model_call, new_run, refusal, tool_call, value_error


@attrs.frozen
class NoRefunds:
    """A user's guard, as the docs show it."""

    name: str = "no_refunds"

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        if getattr(event, "tool", None) == "refund":
            return Verdict(self.name, "policy", "refunds need a human")
        return None


@attrs.frozen
class Always:
    """Trips on every event it is asked about."""

    name: str = "always"
    reason: str = "always"

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        return Verdict(self.name, self.reason, f"{self.reason} said no")


@attrs.frozen
class Never:
    """Never trips."""

    name: str = "always"

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        return None


@attrs.define
class Spy:
    """Remembers what it was shown (a real guard, not a mock)."""

    name: str = "spy"
    seen: list[tuple[int, str, str]] = attrs.field(factory=list)

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        self.seen.append((record.version, event.type, ctx.now.isoformat()))
        return None


class TestDefaultTableNames:
    def test_edges_list_the_built_in_guards(self) -> None:
        """Model calls, model decisions, tool calls and tool requests carry the guard names
        diagrams show."""
        listed = {(t.source, t.event): t.guards for t in DEFAULT_TABLE.transitions if t.guards}
        model = ("max_turns", "deadline", "budget")
        tool = ("deadline", "budget", "max_attempts")
        assert listed == {
            ("running", "model.started"): model,
            ("running", "model.completed"): ("max_calls_per_decision",),
            ("cancel_requested", "model.completed"): ("max_calls_per_decision",),
            ("running", "tool.requested"): ("loop_detected",),
            ("waiting_tool", "tool.requested"): ("loop_detected",),
            ("waiting_tool", "tool.started"): tool,
            ("running", "tool.started"): tool,
        }

    def test_every_listed_name_is_a_built_in_stop_reason(self) -> None:
        """No edge names a guard the library does not have."""
        names = {n for t in DEFAULT_TABLE.transitions for n in t.guards}
        assert names == {r.value for r in StopReason}

    def test_the_plain_reducer_guards_only_model_calls_decisions_and_tool_starts(self) -> None:
        """Without guard objects only the run-limit guards are wired (turns, calls per
        decision, time, budget)."""
        limited = {"model.started", "model.completed", "tool.started"}
        assert DEFAULT_REDUCER.guards.events == limited
        with_loops = Reducer(guards=[LoopDetector()])
        assert with_loops.guards.events == {*limited, "tool.requested"}


class TestWiring:
    def test_a_users_guard_runs_where_it_is_attached(self) -> None:
        """A guard of a few lines, attached to `tool.requested`, stops the run."""
        table = attach_guard(DEFAULT_TABLE, "no_refunds", ["tool.requested"])
        log = new_run()
        log.add("tool.requested", action_id="a1", tool="refund", arguments={"order": "O-1"})
        err = refusal(Reducer(table, [NoRefunds()]), log.events)
        assert (err.guard, err.stop_reason, err.detail) == (
            "no_refunds",
            "policy",
            "refunds need a human",
        )

    def test_a_guard_no_edge_lists_is_a_definition_error(self) -> None:
        """A guard that would never run is refused when the reducer is built."""
        with pytest.raises(InvalidTableError) as info:
            Reducer(guards=[NoRefunds()])
        assert info.value.problems == (
            "guard 'no_refunds' is listed on no edge, so it would never run; list it on the "
            "edges it should check (attach_guard(table, name, events=[...]))",
        )

    def test_a_guard_on_run_terminated_is_a_definition_error(self) -> None:
        """The event that records a stop must never be refusable."""
        table = DEFAULT_TABLE.derive(
            remove=[("paused", "run.terminated", "terminated")],
            add=[attrs.evolve(_edge("paused", "run.terminated"), guards=("always",))],
        )
        with pytest.raises(InvalidTableError) as info:
            Reducer(table)
        assert info.value.problems == (
            "edge paused --run.terminated--> terminated lists guards 'always': "
            "'run.terminated' records a stop and must never be refused",
        )

    def test_attach_guard_refuses_unknown_events_and_run_terminated(self) -> None:
        """Labelling an event no edge has, or `run.terminated`, is an error."""
        with value_error(
            "no edge of table 'agent_run' has event 'tool.teleported'; "
            "'run.terminated' records a stop and must never be refused by a guard"
        ):
            attach_guard(DEFAULT_TABLE, "x", ["run.terminated", "tool.teleported"])

    def test_attach_guard_can_pick_source_states(self) -> None:
        """Only the edges from the given states get the name."""
        table = attach_guard(DEFAULT_TABLE, "x", ["tool.requested"], sources=["running"])
        assert [t.guards for t in table.transitions if t.event == "tool.requested"] == [
            ("loop_detected", "x"),
            ("loop_detected",),
        ]

    def test_guards_run_on_the_edge_taken_not_every_edge_of_the_event(self) -> None:
        """A guard listed only on `batch resolved` leaves the other result edge alone."""
        resolved = _edge("waiting_tool", "tool.completed", "running")
        table = DEFAULT_TABLE.derive(
            remove=[resolved], add=[attrs.evolve(resolved, guards=("always",))]
        )
        reducer = Reducer(table, [Always()])
        log = new_run()
        calls = [{"action_id": a, "tool": "t", "arguments": {}} for a in ("a1", "a2")]
        model_call(log, *calls)
        for call in calls:
            log.add("tool.requested", **call)
            log.add("tool.started", action_id=call["action_id"])
        log.add("tool.completed", action_id="a1", result=1)
        assert fold(reducer, log.events).status == "waiting_tool"
        log.add("tool.completed", action_id="a2", result=2)
        assert refusal(reducer, log.events).detail == "always said no"


class TestReducer:
    def test_guards_see_the_record_before_the_event_and_its_time(self) -> None:
        """A guard is shown the record before the event and the event's `occurred_at`."""
        spy = Spy()
        reducer = Reducer(attach_guard(DEFAULT_TABLE, "spy", ["model.started"]), [spy])
        log = new_run()
        model_call(log)
        fold(reducer, log.events)
        assert spy.seen == [(1, "model.started", "2026-09-01T10:00:01+00:00")]

    def test_run_terminated_is_accepted_past_every_limit(self) -> None:
        """A run over its turns, deadline and budget can still be terminated."""
        log = new_run(
            limits={"max_turns": 1, "max_tokens": 10, "deadline": T0.isoformat()},
        )
        model_call(log, tokens=50)
        model_call(log, tokens=50)
        over = fold(Reducer(run_limits=False), log.events)
        strict = Reducer(guards=[Always(name=reason.value) for reason in StopReason])
        log.add("run.terminated", stop_reason="budget", detail="spent 100 > 10 tokens")
        ended = strict.reduce(over, log.events[-1], GuardContext(T0 + timedelta(days=1)))
        assert (ended.status, ended.stop_reason) == ("terminated", "budget")

    def test_the_guard_object_is_reported_first_when_both_trip(self) -> None:
        """When a run limit and a guard object both trip, the imposed guard is named."""
        log = new_run(limits={"deadline": T0.isoformat()})
        log.add("model.started")
        err = refusal(Reducer(guards=[Deadline(T0 + timedelta(seconds=1))]), log.events)
        assert err.detail == (
            "deadline 2026-09-01T10:00:01+00:00 reached at 2026-09-01T10:00:01+00:00 (0 s past it)"
        )

    def test_a_verdict_becomes_the_run_terminated_event(self) -> None:
        """The runtime's next event after a verdict: `run.terminated` with its reason."""
        log = new_run(limits={"max_turns": 1})
        model_call(log)
        log.add("model.started")
        err = refusal(DEFAULT_REDUCER, log.events)
        record = fold(DEFAULT_REDUCER, log.events[:-1])
        event = Verdict.of(err).terminated_event(record, T0 + timedelta(seconds=9))
        assert event.model_dump(exclude_none=True) == {
            "run_id": "run_1",
            "sequence": 4,
            "type": "run.terminated",
            "occurred_at": "2026-09-01T10:00:09+00:00",
            "stop_reason": "max_turns",
            "detail": "1 of 1 turns used",
        }
        ended = DEFAULT_REDUCER.reduce(record, event)
        assert (ended.status, ended.stop_reason, ended.stop_detail) == (
            "terminated",
            "max_turns",
            "1 of 1 turns used",
        )

    def test_a_loop_refusal_leaves_the_ledger_as_it_was(self) -> None:
        """The refused request is not in the ledger: nothing ran."""
        log = new_run()
        for i in range(2):
            tool_call(log, f"a{i}", "search", {"q": 1}, fail=True)
        log.add("tool.requested", action_id="a2", tool="search", arguments={"q": 1})
        reducer = Reducer(guards=[LoopDetector(threshold=3)])
        refusal(reducer, log.events)
        assert "a2" not in fold(reducer, log.events[:-1]).actions


class TestComposition:
    def test_any_of_gives_the_first_members_verdict(self) -> None:
        """`any_of` trips when one member does, with that member's verdict."""
        guard = any_of(Never(), Always(reason="first"), Always(reason="second"))
        verdict = guard.check(_record(), _model_started(), GuardContext(T0))
        assert verdict == Verdict("always", "first", "first said no")

    def test_all_of_needs_every_member(self) -> None:
        """`all_of` passes when one member passes, and joins the details when all trip."""
        ctx = GuardContext(T0)
        assert all_of(Always(), Never()).check(_record(), _model_started(), ctx) is None
        both = all_of(Always(reason="late"), Always(reason="long"))
        assert both.check(_record(), _model_started(), ctx) == Verdict(
            "always", "late", "late said no; long said no"
        )

    def test_a_combination_of_differently_named_guards_needs_a_name(self) -> None:
        """The edges must know which name to look for."""
        with value_error(
            "any_of() members have different names ('deadline', 'max_turns'): pass name= to "
            "say which table edges check the combination"
        ):
            any_of(MaxTurns(3), Deadline(T0))
        assert any_of(MaxTurns(3), Deadline(T0), name="max_turns").name == "max_turns"

    def test_an_empty_combination_is_refused(self) -> None:
        """`all_of()` would always stop a run: it is a definition error."""
        with value_error("all_of() needs at least one guard"):
            all_of()

    def test_a_combination_runs_in_the_reducer(self) -> None:
        """Late *and* over two turns: `all_of` under the `max_turns` name stops only then."""
        late_and_long = all_of(MaxTurns(2), Deadline(T0), name="max_turns")
        log = new_run()
        model_call(log)
        model_call(log)
        log.add("model.started")
        err = refusal(Reducer(guards=[late_and_long]), log.events)
        assert err.detail == (
            "2 of 2 turns used; deadline 2026-09-01T10:00:00+00:00 reached at "
            "2026-09-01T10:00:05+00:00 (5 s past it)"
        )


def _edge(source: str, event: str, target: str = "terminated") -> Any:
    return next(
        t
        for t in DEFAULT_TABLE.transitions
        if (t.source, t.event, t.target) == (source, event, target)
    )


def _record() -> RunRecord:
    return fold(DEFAULT_REDUCER, new_run().events)


def _model_started() -> Event:
    log = new_run()
    return log.add("model.started")
