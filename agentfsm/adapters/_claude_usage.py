"""The CLI's own figures of what a run spent, in the record as soon as the CLI reports them.

The `claude` CLI prices a session itself: its `ResultMessage` carries `total_cost_usd` and
`modelUsage` (tokens and cost per model), both over the whole session so far, resumes
included (the CLI reads them back from the session's transcript, on another machine too).
It reports them at the end of every leg: a pause (a call deferred for approval, or a wait
in a state of the run's lifecycle), an interrupt (a guard's stop, a cancel), its own limits
(`error_max_turns`, `error_max_budget_usd`), an error, and the end. Nothing states a cost
while a leg runs.

So the adapter appends, at the end of each leg, what those figures hold beyond the record's
usage: the cost (unless the run has `pricing=`, which then prices every call itself) and
the tokens of requests that are no turn of the run (the CLI's side requests, its own
subagents' calls). The completed run's excess cost rides on its final answer's
`model.completed` (as it always did); anything else is a `usage.reported`. Each model call
of the log keeps the tokens its answer streamed, as it came.

Why not a price table of our own, per call: the CLI's prices are its version's (a model we
do not know, cache reads and writes, long-context tiers, its own side requests), so ours
would disagree with the CLI's figure, and correcting an estimate downwards would take a
negative cost the log cannot hold. `pricing=` is there for a cost at every call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentfsm.events import models as m
from agentfsm.record import UsageTotals
from agentfsm.runtime._writer import Spec

__all__ = ["excess", "reported"]

#: Below this a difference of costs is the floating point's, not spending (a cost is a sum
#: of per-call costs on one side and a total on the other).
_EPSILON = 1e-12


def _tokens(model_usage: Mapping[str, Any] | None) -> tuple[int, int] | None:
    """The session's input and output tokens over every model (`modelUsage`), or None."""
    if not model_usage:
        return None
    tokens_in = tokens_out = 0
    for usage in model_usage.values():
        if isinstance(usage, Mapping):
            tokens_in += int(usage.get("inputTokens") or 0)
            tokens_out += int(usage.get("outputTokens") or 0)
    return tokens_in, tokens_out


def excess(
    result: Any, record: UsageTotals, pending: Sequence[Spec] = (), *, priced: bool = False
) -> dict[str, Any] | None:
    """What the CLI's figures in `result` (a `ResultMessage`) hold beyond `record` and the
    usage of `pending` (events about to be appended before it), as a `usage` mapping; None
    when they hold nothing more. With `priced` (the run has `pricing=`), no cost."""
    tokens_in, tokens_out, cost = record.input_tokens, record.output_tokens, record.cost
    for spec in pending:
        usage = spec.fields.get("usage")
        if usage:
            tokens_in += int(usage.get("input_tokens") or 0)
            tokens_out += int(usage.get("output_tokens") or 0)
            cost += float(usage.get("cost") or 0.0)
    out = {"input_tokens": 0, "output_tokens": 0, "cost": 0.0}
    told = _tokens(getattr(result, "model_usage", None))
    if told is not None:
        out["input_tokens"] = max(0, told[0] - tokens_in)
        out["output_tokens"] = max(0, told[1] - tokens_out)
    total = getattr(result, "total_cost_usd", None)
    if not priced and total is not None and total - cost > _EPSILON:
        out["cost"] = total - cost
    return out if any(out.values()) else None


def reported(
    result: Any, record: UsageTotals, pending: Sequence[Spec] = (), *, priced: bool = False
) -> list[Spec]:
    """The `usage.reported` of what `result`'s figures hold beyond the record (see
    `excess`), or nothing."""
    usage = excess(result, record, pending, priced=priced)
    if usage is None:
        return []
    subtype = getattr(result, "subtype", None)
    source = f"claude-agent-sdk ResultMessage ({subtype}): total_cost_usd, modelUsage"
    return [Spec(m.UsageReported, {"usage": usage, "source": source})]
