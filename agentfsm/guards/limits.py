"""The built-in limit guards: turns, attempts, calls per decision, a deadline and a budget.

Each is a small frozen value with a `check` (see `agentfsm.guards.base.Guard`). The same
checks also run from a run's own `run.started.limits`, without any object per run:
`RunLimits` reads `record.limits` (and, for the budget, the context's shared budget).

Every refusal says why in numbers: `3 of 3 turns used`, `spent 1,480 + reserved 200 >
1,500 tokens`.

`MaxCallsPerDecision` is the one whose refusal does not stop the run: a model answer with
more calls than it allows (one answer of 1,000 calls that need approval would put 1,000
requests before a person at once) is refused as a decision. Whoever drives the run records
it as `refused` (`model.completed` with a bounded `refusal`: nothing of it runs, its usage
counts), the model sees why on its next turn, and the run goes on. The Runner and the SDK
adapters write their cap (`DEFAULT_MAX_CALLS_PER_DECISION`, 64, unless told otherwise) into
each run's `limits.max_calls_per_decision`, so the log says what it was under and any
reader checks it. Every run the Runner or an adapter starts (or `submit` creates) is capped
in turns the same way (`DEFAULT_MAX_TURNS`, 100, in `limits.max_turns`): a model that never
gives a final answer stops there (`run.terminated`, `max_turns`) instead of running until
it is killed. Budgets stop
*before* crossing: a model call is refused when what was spent, plus what calls in flight
reserved, plus this call's own estimate would exceed the limit.

An estimate can be wrong, so a call may still cross a limit. That usage is a fact (the call
happened) and the event recording it is accepted, but it is an *overrun* the moment it is
recorded: `overrun` (and `Budget.overrun`) gives the verdict `spent 2,200 > 1,500 tokens`
for a record whose recorded spending is past a limit. What is legal after a crossing follows
from the budget check itself: every `model.started` and `tool.started` is refused once the
run is overspent, so nothing new spends; results of calls already in flight, approvals,
`run.terminated`, `run.failed` and cancellation stay legal. Audits report the overrun at the
crossing event, and the runtime and the SDK adapters stop the run right after it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import attrs

from agentfsm.events.models import (
    Limits,
    ModelCompleted,
    ModelStarted,
    ToolCompleted,
    ToolStarted,
    UsageReported,
)
from agentfsm.guards.base import AnyOf, Guard, GuardContext, Verdict, _instant
from agentfsm.names import EventType, StopReason

if TYPE_CHECKING:
    from agentfsm.events.models import Event
    from agentfsm.guards.budget import SharedBudget
    from agentfsm.record import RunRecord

__all__ = [
    "DEFAULT_MAX_CALLS_PER_DECISION",
    "DEFAULT_MAX_TURNS",
    "Budget",
    "Deadline",
    "MaxAttempts",
    "MaxCallsPerDecision",
    "MaxTurns",
    "RunLimits",
    "cap_timeout",
    "guards_from_limits",
    "overrun",
    "remaining",
    "spends",
    "with_calls_cap",
    "with_caps",
]

_MAX_TURNS = StopReason.MAX_TURNS.value
_MAX_ATTEMPTS = StopReason.MAX_ATTEMPTS.value
_DEADLINE = StopReason.DEADLINE.value
_BUDGET = StopReason.BUDGET.value
_CALLS = StopReason.MAX_CALLS_PER_DECISION.value
_MODEL_STARTED = EventType.MODEL_STARTED.value

#: The calls one model decision may propose when the Runner or an adapter is not told
#: otherwise: more than any batch a person can review at once, far fewer than a runaway
#: model can ask for in one answer.
DEFAULT_MAX_CALLS_PER_DECISION = 64

#: The turns (model calls) a run the Runner starts may take when it is not told otherwise:
#: more than the agent loops we have seen a task need, and a bound on one whose model never
#: gives a final answer (a runaway under a cost budget whose model reported no cost ran
#: until it was killed). `RunnerConfig(max_turns=None)` lifts it.
DEFAULT_MAX_TURNS = 100

# Costs are floats summed one call at a time; 0.1 + 0.2 must not overshoot a limit of 0.3.
_COST_SLACK = 1e-9


def _at_least(n: int) -> Any:
    def check(instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
        if value.__class__ is not int or value < n:
            raise ValueError(f"{attribute.name} must be an integer >= {n}, got {value!r}")

    return check


def _num(value: float) -> str:
    """A number as people read it: thousands separated, no float noise (`0.30000000000000004`)."""
    if isinstance(value, int):
        return f"{value:,}"
    text = f"{value:,.6f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"


# -- turns and attempts ----------------------------------------------------------------------


def _turns(name: str, limit: int, record: RunRecord, event: Event) -> Verdict | None:
    if event.type == _MODEL_STARTED and record.turn >= limit:
        return Verdict(name, _MAX_TURNS, f"{record.turn} of {limit} turns used")
    return None


@attrs.frozen
class MaxTurns:
    """A run gets at most `limit` turns: the (limit+1)-th `model.started` is refused.

    Attributes:
        limit: turns allowed (>= 1).
        name: the edge label (`max_turns`).
    """

    limit: int = attrs.field(validator=_at_least(1))
    name: str = attrs.field(default=_MAX_TURNS, kw_only=True)

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        """Refuse `model.started` once `limit` turns were used."""
        return _turns(self.name, self.limit, record, event)


@attrs.frozen
class MaxAttempts:
    """An action gets at most `limit` attempts: the (limit+1)-th `tool.started` is refused.

    Attributes:
        limit: attempts allowed per action (>= 1; 1 means no retries).
        name: the edge label (`max_attempts`).
    """

    limit: int = attrs.field(validator=_at_least(1))
    name: str = attrs.field(default=_MAX_ATTEMPTS, kw_only=True)

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        """Refuse a `tool.started` whose attempt number is over the limit."""
        if isinstance(event, ToolStarted) and event.attempt > self.limit:
            action = record.actions[event.action_id]
            return Verdict(
                self.name,
                _MAX_ATTEMPTS,
                f"{action.attempts} of {self.limit} attempts of action '{action.action_id}' "
                f"('{action.tool}') used",
            )
        return None


# -- calls per decision ----------------------------------------------------------------------


def _calls(name: str, limit: int, event: Event) -> Verdict | None:
    if not isinstance(event, ModelCompleted):
        return None
    calls = event.tool_calls
    if calls is None or len(calls) <= limit:
        return None
    allowed = "is" if limit == 1 else "are"
    return Verdict(
        name,
        _CALLS,
        f"{len(calls):,} calls proposed in one decision; at most {limit:,} {allowed} allowed: "
        f"none of them ran, propose at most {limit:,} at a time",
    )


@attrs.frozen
class MaxCallsPerDecision:
    """A model decision proposes at most `limit` calls: a `model.completed` with more is
    refused, and recorded as a `refused` decision the model sees (the run goes on).

    Attributes:
        limit: calls allowed in one decision (>= 1).
        name: the edge label (`max_calls_per_decision`).
    """

    limit: int = attrs.field(validator=_at_least(1))
    name: str = attrs.field(default=_CALLS, kw_only=True)

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        """Refuse a `model.completed` proposing more than `limit` calls."""
        return _calls(self.name, self.limit, event)


def with_caps(limits: Limits | None, **caps: int | None) -> Limits | None:
    """`limits` for a run started under default caps (`max_turns=100`, ...: fields of
    `Limits`): each cap is written in unless `limits` sets that field itself (to a number,
    or to None to lift it for this run); a cap of None adds none. So the run's log says
    which caps it ran under, and any reader checks them.

    Raises:
        TypeError: a cap names no field of `Limits`.
    """
    unknown = sorted(set(caps) - set(Limits.model_fields))
    if unknown:
        raise TypeError(f"{', '.join(unknown)} is not a field of Limits")
    given = limits.model_fields_set if limits is not None else set()
    added = {name: cap for name, cap in caps.items() if cap is not None and name not in given}
    if not added:
        return limits
    # What the caller set stays set, a None that lifts a cap included (the log says so).
    kept = limits.model_dump(exclude_unset=True) if limits is not None else {}
    return Limits.model_validate({**kept, **added})


def with_calls_cap(limits: Limits | None, cap: int | None) -> Limits | None:
    """`with_caps(limits, max_calls_per_decision=cap)`: the cap of calls per decision a run
    the Runner or an adapter starts under."""
    return with_caps(limits, max_calls_per_decision=cap)


# -- deadline --------------------------------------------------------------------------------


def _aware(value: datetime | str) -> datetime:
    at = _instant(value) if isinstance(value, str) else value
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"a deadline must be aware (have an offset); got {value!r}")
    return at


@functools.lru_cache(maxsize=1024)
def _deadline_of(text: str) -> datetime:
    # A run's deadline is one string read on every model and tool call of the run.
    return _instant(text)


def _late(name: str, at: datetime, now: datetime) -> Verdict | None:
    if now < at:
        return None
    past = (now - at).total_seconds()
    return Verdict(
        name,
        _DEADLINE,
        f"deadline {at.isoformat()} reached at {now.isoformat()} ({_num(past)} s past it)",
    )


@attrs.frozen
class Deadline:
    """No model or tool call starts at or after `at` (an absolute, aware time).

    Attributes:
        at: the deadline; an RFC 3339 string is parsed.
        name: the edge label (`deadline`).
    """

    at: datetime = attrs.field(converter=_aware)
    name: str = attrs.field(default=_DEADLINE, kw_only=True)

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        """Refuse when the context's `now` is at or past the deadline."""
        return _late(self.name, self.at, ctx.now)

    def remaining(self, now: datetime) -> float:
        """Seconds left before the deadline (0 once it has passed)."""
        return max(0.0, (self.at - now).total_seconds())


# -- budget ----------------------------------------------------------------------------------


def _budget(
    name: str,
    max_tokens: int | None,
    max_cost: float | None,
    spent: tuple[int, float, int, float],
    event: Event,
    whose: str = "",
) -> Verdict | None:
    """The budget rule, for one run or a tree: `spent` is (tokens, cost, reserved t, c).

    A model call reserves its estimate; a tool call spends cost but has no estimate. A call
    that spends something needs some room left even with no estimate (a call rarely costs
    nothing); every event is refused once the budget is already overspent.
    """
    tokens, cost, held_tokens, held_cost = spent
    if isinstance(event, ModelStarted):
        held_tokens += event.reserved_tokens or 0
        held_cost += event.reserved_cost or 0.0
        uses_tokens = uses_cost = True
        bare = not event.reserved_tokens
        bare_cost = not event.reserved_cost
    else:
        uses_tokens = False
        uses_cost = isinstance(event, ToolStarted)
        bare = bare_cost = True
    if max_tokens is not None:
        if tokens + held_tokens > max_tokens:
            return Verdict(
                name,
                _BUDGET,
                f"{whose}spent {_num(tokens)} + reserved {_num(held_tokens)} > "
                f"{_num(max_tokens)} tokens",
            )
        if uses_tokens and bare and tokens + held_tokens >= max_tokens:
            return Verdict(
                name,
                _BUDGET,
                f"{whose}spent {_num(tokens)} + reserved {_num(held_tokens)} leaves nothing "
                f"of {_num(max_tokens)} tokens",
            )
    if max_cost is not None:
        slack = _COST_SLACK * max(1.0, max_cost)
        if cost + held_cost > max_cost + slack:
            return Verdict(
                name,
                _BUDGET,
                f"{whose}spent {_num(cost)} + reserved {_num(held_cost)} > max cost "
                f"{_num(max_cost)}",
            )
        if uses_cost and bare_cost and cost + held_cost >= max_cost - slack:
            return Verdict(
                name,
                _BUDGET,
                f"{whose}spent {_num(cost)} + reserved {_num(held_cost)} leaves nothing of "
                f"max cost {_num(max_cost)}",
            )
    return None


def _overspent(
    name: str,
    max_tokens: int | None,
    max_cost: float | None,
    tokens: int,
    cost: float,
    whose: str = "",
) -> Verdict | None:
    """The overrun rule: recorded spending (no reservations: they are not spent) past a limit."""
    if max_tokens is not None and tokens > max_tokens:
        return Verdict(name, _BUDGET, f"{whose}spent {_num(tokens)} > {_num(max_tokens)} tokens")
    if max_cost is not None and cost > max_cost + _COST_SLACK * max(1.0, max_cost):
        return Verdict(name, _BUDGET, f"{whose}spent {_num(cost)} > max cost {_num(max_cost)}")
    return None


#: The event types `spends` can say yes to: a reducer asks no guard about any other.
SPENDING_TYPES = frozenset(
    cls.model_fields["type"].default for cls in (ModelCompleted, ToolCompleted, UsageReported)
)


def spends(event: Event) -> bool:
    """Whether `event` records spending: a model call's usage, a tool's cost, or usage an
    SDK reported (`usage.reported`), above zero.

    Only such an event can take a run past a budget, so only it is checked for an overrun.
    """
    if isinstance(event, ModelCompleted | UsageReported):
        usage = event.usage
        return usage is not None and (
            usage.input_tokens > 0 or usage.output_tokens > 0 or usage.cost > 0
        )
    return isinstance(event, ToolCompleted) and bool(event.cost)


def _own(record: RunRecord) -> tuple[int, float, int, float]:
    usage = record.usage
    return (
        usage.input_tokens + usage.output_tokens,
        usage.cost,
        record.reserved_tokens,
        record.reserved_cost,
    )


def _check_limit(value: float | None, what: str) -> None:
    if value is not None and (value < 0 or not math.isfinite(value)):
        raise ValueError(f"{what} must be a finite number >= 0, got {value!r}")


@attrs.frozen
class Budget:
    """Tokens and cost a run may spend, counting reservations of calls in flight.

    Checked on `model.started` (with the call's `reserved_tokens`/`reserved_cost` as its
    estimate) and `tool.started` (tools spend cost). Usage adds up from
    `model.completed.usage` and `tool.completed.cost`; a handoff changes nothing.

    Attributes:
        max_tokens: input plus output tokens allowed, or None.
        max_cost: cost allowed, or None.
        name: the edge label (`budget`).
    """

    max_tokens: int | None = None
    max_cost: float | None = None
    name: str = attrs.field(default=_BUDGET, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.max_tokens is None and self.max_cost is None:
            raise ValueError("Budget needs max_tokens, max_cost or both")
        _check_limit(self.max_tokens, "max_tokens")
        _check_limit(self.max_cost, "max_cost")

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        """Refuse a call that would take the run's spending past a limit."""
        return _budget(self.name, self.max_tokens, self.max_cost, _own(record), event)

    def overrun(self, record: RunRecord) -> Verdict | None:
        """The verdict when `record`'s recorded spending is past a limit (an overrun), else None."""
        tokens, cost, _, _ = _own(record)
        return _overspent(self.name, self.max_tokens, self.max_cost, tokens, cost)


# -- the run's own limits (run.started.limits), without an object per run --------------------


class RunLimits:
    """The run's own `run.started.limits` (and a shared budget), for the names an edge lists.

    One per edge, built by `GuardSet`: it reads `record.limits` once and checks only what
    the edge names and the run set, so a run with `max_turns` alone pays for one comparison.
    It takes `ctx=None` and then reads the time from the event, only if a deadline is set.

    Args:
        names: the guard names the edge lists; `max_turns`, `max_calls_per_decision`,
            `deadline` and `budget` count.
    """

    __slots__ = ("budget", "calls", "deadline", "turns")

    def __init__(self, names: Iterable[str]) -> None:
        wanted = set(names)
        self.turns = _MAX_TURNS in wanted
        self.calls = _CALLS in wanted
        self.deadline = _DEADLINE in wanted
        self.budget = _BUDGET in wanted

    def __bool__(self) -> bool:
        return self.turns or self.calls or self.deadline or self.budget

    def check(self, record: RunRecord, event: Event, ctx: GuardContext | None) -> Verdict | None:
        """The first verdict of the run's own limits, then of its shared budget."""
        limits = record.limits
        if limits is not None:
            if self.turns and limits.max_turns is not None:
                verdict = _turns(_MAX_TURNS, limits.max_turns, record, event)
                if verdict is not None:
                    return verdict
            if self.calls and limits.max_calls_per_decision is not None:
                verdict = _calls(_CALLS, limits.max_calls_per_decision, event)
                if verdict is not None:
                    return verdict
            if self.deadline and limits.deadline is not None:
                now = ctx.now if ctx is not None else _instant(event.occurred_at)
                verdict = _late(_DEADLINE, _deadline_of(limits.deadline), now)
                if verdict is not None:
                    return verdict
            if self.budget and (limits.max_tokens is not None or limits.max_cost is not None):
                own = _own(record)
                verdict = _budget(_BUDGET, limits.max_tokens, limits.max_cost, own, event)
                if verdict is not None:
                    return verdict
        if self.budget and ctx is not None and ctx.budget is not None:
            return _shared(record, event, ctx.budget)
        return None


def _shared(record: RunRecord, event: Event, shared: SharedBudget) -> Verdict | None:
    """The tree's totals (this run's live figures, the others' last charges) vs the root's."""
    if not shared.covers(record.run_id):
        return None
    others = shared.total(excluding=record.run_id)
    tokens, cost, held_tokens, held_cost = _own(record)
    spent = (
        tokens + others.tokens,
        cost + others.cost,
        held_tokens + others.reserved_tokens,
        held_cost + others.reserved_cost,
    )
    whose = f"root '{shared.root}' ({len(shared.runs)} runs): "
    return _budget(_BUDGET, shared.max_tokens, shared.max_cost, spent, event, whose)


def overrun(record: RunRecord, ctx: GuardContext | None = None) -> Verdict | None:
    """The verdict when `record` has spent past its own `limits` or its tree's shared budget.

    `record` is the run *after* an event; reservations do not count (nothing was spent).
    A shared budget (`ctx.budget`) counts this record's live figures and the other runs'
    last charges, as the `budget` check does.
    """
    tokens, cost, _, _ = _own(record)
    limits = record.limits
    if limits is not None and (limits.max_tokens is not None or limits.max_cost is not None):
        verdict = _overspent(_BUDGET, limits.max_tokens, limits.max_cost, tokens, cost)
        if verdict is not None:
            return verdict
    shared = ctx.budget if ctx is not None else None
    if shared is None or not shared.covers(record.run_id):
        return None
    others = shared.total(excluding=record.run_id)
    whose = f"root '{shared.root}' ({len(shared.runs)} runs): "
    return _overspent(
        _BUDGET, shared.max_tokens, shared.max_cost, tokens + others.tokens,
        cost + others.cost, whose,
    )  # fmt: skip


def guards_from_limits(limits: Limits | Mapping[str, Any]) -> tuple[Guard, ...]:
    """The guard objects for a set of limits (`max_turns`, `max_calls_per_decision`,
    `deadline`, `max_tokens`, `max_cost`).

    Useful to impose limits from outside the log, as audits and the CLI do.
    """
    if not isinstance(limits, Limits):
        limits = Limits.model_validate(limits)
    guards: list[Guard] = []
    if limits.max_turns is not None:
        guards.append(MaxTurns(limits.max_turns))
    if limits.max_calls_per_decision is not None:
        guards.append(MaxCallsPerDecision(limits.max_calls_per_decision))
    if limits.deadline is not None:
        guards.append(Deadline(limits.deadline))
    if limits.max_tokens is not None or limits.max_cost is not None:
        guards.append(Budget(limits.max_tokens, limits.max_cost))
    return tuple(guards)


# -- the time left ---------------------------------------------------------------------------


def _deadlines(guards: Iterable[Guard]) -> Iterable[datetime]:
    for guard in guards:
        if isinstance(guard, Deadline):
            yield guard.at
        elif isinstance(guard, AnyOf):
            yield from _deadlines(guard.members)


def remaining(
    record: RunRecord, now: datetime, guards: Iterable[Guard] = (), *, run_limits: bool = True
) -> float | None:
    """Seconds left before the earliest deadline that applies to the run, or None if none does.

    Looks at the run's own `limits.deadline` (unless `run_limits` is off) and the `Deadline`
    guards given (also inside `any_of`; an `all_of` deadline does not stop a run on its
    own). Never negative.
    """
    times = list(_deadlines(guards))
    if run_limits and record.limits is not None and record.limits.deadline is not None:
        times.append(_deadline_of(record.limits.deadline))
    if not times:
        return None
    return max(0.0, (min(times) - now).total_seconds())


def cap_timeout(seconds: float | None, left: float | None) -> float | None:
    """A downstream timeout capped to the time left: 10 s with 7 s left becomes 7 s.

    Args:
        seconds: the timeout the caller wanted, or None for none.
        left: the time left (`remaining(...)`), or None when there is no deadline.
    """
    if left is None:
        return seconds
    if seconds is None:
        return left
    return min(seconds, left)
