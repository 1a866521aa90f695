"""A model call without usage under a budget: the run stops instead of spending unseen.

A token or cost limit is checked against the usage each `model.completed` reports. A model
(or an SDK's client) that reports none — a streamed Chat Completions answer without
`stream_options.include_usage`, a LangChain `ChatOpenAI` streaming without `stream_usage`
— would leave the record at zero, and every limit would silently stop working. So whoever
writes a run (the Runner and every SDK adapter, through the `Writer`) applies one rule: when
the run is under a budget (a token or cost limit of its own, its tree's shared budget, a
`Budget` guard, or a reservation on the call) and a `model.completed` arrives without usage,
the event is appended (the call happened) and the run is stopped right after it, as for an
overrun: `run.terminated`, `stop_reason="budget"`, the detail naming the missing usage.

The adapters first ask their SDK for usage where it can be asked (the OpenAI Agents SDK's
`ModelSettings(include_usage=True)`), so the stop is for what cannot be asked for.
"""

from __future__ import annotations

from collections.abc import Iterable

from agentfsm.events import models as m
from agentfsm.events.models import Event
from agentfsm.guards.base import Guard, GuardContext, Verdict
from agentfsm.guards.limits import Budget
from agentfsm.names import StopReason
from agentfsm.record import RunRecord

__all__ = ["MISSING_USAGE", "budgeted", "missing_usage"]

#: The start of the detail of a stop for a model answer without usage (tests match on it).
MISSING_USAGE = "usage missing"


def budgeted(
    record: RunRecord, ctx: GuardContext | None = None, guards: Iterable[Guard] = ()
) -> str | None:
    """What puts `record`'s run under a budget (for the stop's detail), or None if nothing.

    A token or cost limit of its own, its tree's shared budget, a `Budget` guard, or a
    reservation of the model call in flight.
    """
    limits = record.limits
    if limits is not None and limits.max_tokens is not None:
        return f"max_tokens {limits.max_tokens:,}"
    if limits is not None and limits.max_cost is not None:
        return f"max_cost {limits.max_cost:g}"
    shared = ctx.budget if ctx is not None else None
    if shared is not None and shared.covers(record.run_id):
        return f"the shared budget of root '{shared.root}'"
    for guard in guards:
        if isinstance(guard, Budget):
            return f"the guard {guard.name!r}"
    if record.reserved_tokens > 0 or record.reserved_cost > 0:
        return "the call's reservation"
    return None


def missing_usage(
    before: RunRecord, event: Event, ctx: GuardContext | None = None, guards: Iterable[Guard] = ()
) -> Verdict | None:
    """The stop for `event`, a `model.completed` without usage on a budgeted run; else None."""
    if not isinstance(event, m.ModelCompleted) or event.usage is not None:
        return None
    under = budgeted(before, ctx, guards)
    if under is None:
        return None
    return Verdict(
        StopReason.BUDGET,
        StopReason.BUDGET,
        f"{MISSING_USAGE}: the model answered without reporting its tokens, so {under} "
        "cannot be checked; ask the model or SDK for usage (docs/adapters.md, 'Usage')",
    )
