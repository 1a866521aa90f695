"""The built-in limit guards at their boundaries: turns, attempts, deadline, budget."""

from __future__ import annotations

from datetime import timedelta

import pytest

from agentfsm import GuardRejectedError, IllegalTransitionError
from agentfsm.guards import (
    Budget,
    Deadline,
    GuardContext,
    MaxAttempts,
    MaxTurns,
    cap_timeout,
    guards_from_limits,
    remaining,
)
from agentfsm.reducers import Reducer
from tests.guardlogs import T0, fold, model_call, new_run, refusal, tool_call, value_error

PLAIN = Reducer()


class TestMaxTurns:
    def test_the_last_allowed_turn_is_accepted(self) -> None:
        """With a limit of 3, the third model call is accepted."""
        log = new_run()
        for _ in range(3):
            model_call(log)
        assert fold(Reducer(guards=[MaxTurns(3)]), log.events).turn == 3

    def test_one_turn_over_is_refused_with_the_count(self) -> None:
        """The fourth `model.started` under `MaxTurns(3)` is refused: `3 of 3 turns used`."""
        log = new_run()
        for _ in range(3):
            model_call(log)
        log.add("model.started")
        err = refusal(Reducer(guards=[MaxTurns(3)]), log.events)
        assert (err.guard, err.stop_reason, err.detail) == (
            "max_turns",
            "max_turns",
            "3 of 3 turns used",
        )
        assert (err.run_id, err.sequence, err.state, err.event) == (
            "run_1",
            8,
            "running",
            "model.started",
        )
        assert str(err) == (
            "run 'run_1' is 'running': event 'model.started' (sequence 8) is refused by guard "
            "'max_turns' (max_turns): 3 of 3 turns used"
        )

    def test_the_runs_own_limit_applies_without_any_guard_object(self) -> None:
        """`run.started.limits.max_turns` is enforced by the plain reducer."""
        log = new_run(limits={"max_turns": 1})
        model_call(log)
        log.add("model.started")
        assert refusal(PLAIN, log.events).detail == "1 of 1 turns used"

    def test_a_refusal_is_not_an_illegal_transition(self) -> None:
        """A guard refusal is a `GuardRejectedError`, never an `IllegalTransitionError`."""
        log = new_run(limits={"max_turns": 1})
        model_call(log)
        log.add("model.started")
        err = refusal(PLAIN, log.events)
        assert not isinstance(err, IllegalTransitionError)

    def test_a_handoff_does_not_reset_the_turn_count(self) -> None:
        """Turns count across agents: a handoff does not give a fresh allowance."""
        log = new_run(limits={"max_turns": 2})
        model_call(log)
        log.add("handoff", to_agent="billing")
        model_call(log)
        log.add("model.started")
        assert refusal(PLAIN, log.events).detail == "2 of 2 turns used"

    def test_limit_must_be_positive(self) -> None:
        """`MaxTurns(0)` is a definition error."""
        with value_error("limit must be an integer >= 1, got 0"):
            MaxTurns(0)


class TestMaxAttempts:
    def _retries(self, attempts: int) -> list:  # type: ignore[type-arg]
        log = new_run()
        log.add("tool.requested", action_id="a1", tool="search", arguments={"q": "x"})
        error = {"kind": "timeout", "message": "slow", "retryable": True}
        for n in range(1, attempts + 1):
            log.add("tool.started", action_id="a1", attempt=n)
            if n < attempts:
                log.add("tool.failed", action_id="a1", error=error)
        return log.events

    def test_the_last_allowed_attempt_is_accepted(self) -> None:
        """With a limit of 2, the second attempt starts."""
        record = fold(Reducer(guards=[MaxAttempts(2)]), self._retries(2))
        assert record.actions["a1"].attempts == 2

    def test_one_attempt_over_is_refused(self) -> None:
        """The third attempt under `MaxAttempts(2)` is refused, naming the action and tool."""
        err = refusal(Reducer(guards=[MaxAttempts(2)]), self._retries(3))
        assert (err.guard, err.stop_reason, err.detail) == (
            "max_attempts",
            "max_attempts",
            "2 of 2 attempts of action 'a1' ('search') used",
        )


class TestDeadline:
    DEADLINE = (T0 + timedelta(seconds=5)).isoformat()

    def test_a_call_just_before_the_deadline_starts(self) -> None:
        """A `model.started` one second before the deadline is accepted."""
        log = new_run()  # run.started at T0+0 s, the model.started at T0+4 s
        log.add("run.paused", reason="wait")
        log.add("run.resumed")
        log.add("handoff", to_agent="b")
        log.add("model.started")
        assert fold(Reducer(guards=[Deadline(self.DEADLINE)]), log.events).turn == 1

    def test_a_call_exactly_at_the_deadline_is_refused(self) -> None:
        """No time left is no time: a call at the deadline itself is refused."""
        log = new_run()
        for _ in range(4):
            log.add("handoff", to_agent="b")
        log.add("model.started")  # at T0 + 5 s
        err = refusal(Reducer(guards=[Deadline(self.DEADLINE)]), log.events)
        assert (err.guard, err.stop_reason, err.detail) == (
            "deadline",
            "deadline",
            "deadline 2026-09-01T10:00:05+00:00 reached at 2026-09-01T10:00:05+00:00 (0 s past it)",
        )

    def test_a_tool_call_after_the_deadline_is_refused(self) -> None:
        """The deadline is checked before tool calls too, from the run's own limits."""
        log = new_run(step=2.0, limits={"deadline": self.DEADLINE})
        log.add("tool.requested", action_id="a1", tool="search", arguments={})  # T0 + 2 s
        log.add("tool.started", action_id="a1")  # T0 + 4 s
        log.add("tool.completed", action_id="a1", result=1)
        log.add("tool.requested", action_id="a2", tool="search", arguments={})
        log.add("tool.started", action_id="a2")  # T0 + 10 s
        err = refusal(PLAIN, log.events)
        assert err.detail == (
            "deadline 2026-09-01T10:00:05+00:00 reached at 2026-09-01T10:00:10+00:00 (5 s past it)"
        )
        assert err.event == "tool.started"

    def test_an_injected_clock_decides_instead_of_the_event_time(self) -> None:
        """Given a context, the runtime's clock reading is `now`, not `occurred_at`."""
        log = new_run(limits={"deadline": self.DEADLINE})
        log.add("model.started")  # stamped T0 + 1 s
        record = fold(PLAIN, log.events[:-1])
        late = GuardContext(T0 + timedelta(seconds=6))
        with pytest.raises(GuardRejectedError) as info:
            PLAIN.reduce(record, log.events[-1], late)
        assert info.value.detail.endswith("reached at 2026-09-01T10:00:06+00:00 (1 s past it)")

    def test_a_naive_clock_is_refused(self) -> None:
        """A context's time must carry an offset."""
        with value_error(
            "a guard's clock must be aware (have an offset); "
            "got datetime.datetime(2026, 9, 1, 10, 0)"
        ):
            GuardContext(T0.replace(tzinfo=None))

    def test_a_naive_deadline_is_refused(self) -> None:
        """A deadline must carry an offset."""
        with value_error(
            "a deadline must be aware (have an offset); got datetime.datetime(2026, 9, 1, 10, 0)"
        ):
            Deadline(T0.replace(tzinfo=None))


class TestRemainingTime:
    def test_a_timeout_is_capped_to_the_time_left(self) -> None:
        """A 10 s timeout with 7 s left becomes 7 s; a 5 s one stays 5 s."""
        left = Deadline(T0 + timedelta(seconds=7)).remaining(T0)
        assert left == 7.0
        assert cap_timeout(10.0, left) == 7.0
        assert cap_timeout(5.0, left) == 5.0

    def test_no_deadline_leaves_the_timeout_alone(self) -> None:
        """Without a deadline there is nothing to cap to; without a timeout the time left is it."""
        assert cap_timeout(10.0, None) == 10.0
        assert cap_timeout(None, 3.0) == 3.0
        assert cap_timeout(None, None) is None

    def test_the_time_left_is_never_negative(self) -> None:
        """Past the deadline the time left is zero."""
        assert Deadline(T0).remaining(T0 + timedelta(seconds=9)) == 0.0

    def test_the_earliest_of_the_run_limit_and_the_guards_wins(self) -> None:
        """`remaining` takes the run's own deadline and the reducer's, whichever is sooner."""
        log = new_run(limits={"deadline": (T0 + timedelta(seconds=30)).isoformat()})
        record = fold(PLAIN, log.events)
        reducer = Reducer(guards=[Deadline(T0 + timedelta(seconds=20))])
        assert reducer.guards.remaining(record, T0) == 20.0
        assert remaining(record, T0) == 30.0
        assert remaining(record, T0, run_limits=False) is None


class TestBudget:
    def test_spending_up_to_the_limit_exactly_is_allowed(self) -> None:
        """spent 1,300 + reserved 200 = 1,500 of 1,500 tokens: the call starts."""
        log = new_run(limits={"max_tokens": 1500})
        model_call(log, reserved_tokens=1300, tokens=1300)
        log.add("model.started", reserved_tokens=200)
        record = fold(PLAIN, log.events)
        assert (record.usage.total_tokens, record.reserved_tokens) == (1300, 200)

    def test_a_reservation_one_over_is_refused_before_the_call(self) -> None:
        """The call is refused when spent + its estimate would cross the limit."""
        log = new_run(limits={"max_tokens": 1500})
        model_call(log, tokens=1300)
        log.add("model.started", reserved_tokens=201)
        err = refusal(PLAIN, log.events)
        assert (err.guard, err.stop_reason, err.detail) == (
            "budget",
            "budget",
            "spent 1,300 + reserved 201 > 1,500 tokens",
        )

    def test_a_call_without_estimate_needs_some_budget_left(self) -> None:
        """With the whole budget spent, an unestimated model call is refused."""
        log = new_run(limits={"max_tokens": 1500})
        model_call(log, tokens=1500)
        log.add("model.started")
        assert refusal(PLAIN, log.events).detail == (
            "spent 1,500 + reserved 0 leaves nothing of 1,500 tokens"
        )

    def test_one_token_left_lets_an_unestimated_call_start(self) -> None:
        """spent 1,499 of 1,500 leaves room for a call that did not estimate."""
        log = new_run(limits={"max_tokens": 1500})
        model_call(log, tokens=1499)
        log.add("model.started")
        assert fold(PLAIN, log.events).turn == 2

    def test_float_costs_that_add_up_to_the_limit_do_not_overshoot(self) -> None:
        """0.1 + 0.2 spent and 0.3 reserved fit a limit of 0.6 (float noise is ignored)."""
        log = new_run()
        model_call(log, cost=0.1)
        model_call(log, cost=0.2)
        log.add("model.started", reserved_cost=0.3)
        assert fold(Reducer(guards=[Budget(max_cost=0.6)]), log.events).turn == 3

    def test_cost_over_the_limit_is_refused_with_readable_numbers(self) -> None:
        """The detail shows costs without float noise."""
        log = new_run()
        model_call(log, cost=0.1)
        model_call(log, cost=0.2)
        log.add("model.started", reserved_cost=0.31)
        err = refusal(Reducer(guards=[Budget(max_cost=0.6)]), log.events)
        assert err.detail == "spent 0.3 + reserved 0.31 > max cost 0.6"

    def test_tool_costs_count_and_a_tool_call_needs_budget_left(self) -> None:
        """Tool costs add up; a tool call is refused once the cost budget is used up."""
        log = new_run(limits={"max_cost": 1.0})
        tool_call(log, "a1", result=1, cost=0.75)
        tool_call(log, "a2", result=2, cost=0.25)
        log.add("tool.requested", action_id="a3", tool="search", arguments={})
        log.add("tool.started", action_id="a3")
        err = refusal(PLAIN, log.events)
        assert (err.event, err.detail) == (
            "tool.started",
            "spent 1 + reserved 0 leaves nothing of max cost 1",
        )

    def test_a_handoff_keeps_the_budget(self) -> None:
        """Usage carries across a handoff: the next agent's call is refused."""
        log = new_run(limits={"max_tokens": 1000})
        model_call(log, tokens=900)
        log.add("handoff", to_agent="billing")
        log.add("model.started", reserved_tokens=200)
        assert refusal(PLAIN, log.events).detail == "spent 900 + reserved 200 > 1,000 tokens"

    def test_a_budget_needs_a_limit(self) -> None:
        """`Budget()` with no limit at all is a definition error."""
        with value_error("Budget needs max_tokens, max_cost or both"):
            Budget()


class TestStricterWins:
    def test_a_stricter_guard_object_wins_over_the_run_limit(self) -> None:
        """`MaxTurns(1)` stops a run whose own limit is 5."""
        log = new_run(limits={"max_turns": 5})
        model_call(log)
        log.add("model.started")
        assert refusal(Reducer(guards=[MaxTurns(1)]), log.events).detail == "1 of 1 turns used"

    def test_a_stricter_run_limit_wins_over_the_guard_object(self) -> None:
        """A run limit of 1 stops the run although the reducer's guard allows 5."""
        log = new_run(limits={"max_turns": 1})
        model_call(log)
        log.add("model.started")
        assert refusal(Reducer(guards=[MaxTurns(5)]), log.events).detail == "1 of 1 turns used"

    def test_run_limits_can_be_ignored(self) -> None:
        """`run_limits=False` folds a log that overran its own limits."""
        log = new_run(limits={"max_turns": 1})
        model_call(log)
        model_call(log)
        assert fold(Reducer(run_limits=False), log.events).turn == 2


class TestGuardsFromLimits:
    def test_each_limit_becomes_its_guard(self) -> None:
        """Turns, deadline and budget limits become `MaxTurns`, `Deadline` and `Budget`."""
        guards = guards_from_limits(
            {"max_turns": 3, "deadline": "2026-09-01T10:00:05Z", "max_cost": 2.5}
        )
        assert guards == (
            MaxTurns(3),
            Deadline(T0 + timedelta(seconds=5)),
            Budget(max_cost=2.5),
        )

    def test_no_limits_no_guards(self) -> None:
        """Empty limits give no guards."""
        assert guards_from_limits({}) == ()
