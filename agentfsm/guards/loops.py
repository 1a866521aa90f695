"""Loop detection: the same call, again and again, while nothing new is observed.

An action's fingerprint is `hash(tool, canonical arguments, observable state)`. The state is
not a digest of `record.facts` but the run's *observation count*: how many tool results so
far changed a fact (a success whose result differs from the previous success of the same
tool, or a tool's first success). Two reasons:

- a digest of facts takes A -> B -> A for "no change", so a status that keeps flipping would
  count as a loop; with a count every change is progress, as the issue asks ("any changing
  result never trips");
- it is cheap: no facts are serialised on the hot path.

So two actions share a fingerprint exactly when they are the same call (tool and canonical
arguments: key order, whitespace and `1`/`1.0` do not matter; `true` is not `1`) and no
result changed a fact between them. `LoopDetector` refuses the `tool.requested` that would
be the `threshold`-th action with one fingerprint among the last `window` executed actions.
The first call of a loop sees one fact less than the ones after it (it observes the result
the others repeat), so with `threshold=3` the fourth identical call is the one refused when
the first one succeeded, the third when every call failed.

Polling tools (declared with their poll limit) may repeat while their result changes, and up
to `poll limit` times in a row with an unchanged one; their window stretches to fit.

Order is the ledger's (the order actions appeared in), which is request order for runs that
run one call at a time; results are compared with `same_json`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

import attrs

from agentfsm.events._canonical import digest, same_json
from agentfsm.events.models import ToolRequested
from agentfsm.guards.base import GuardContext, Verdict
from agentfsm.names import ActionStatus, StopReason

if TYPE_CHECKING:
    from agentfsm.events.models import Event
    from agentfsm.record import Action, RunRecord

__all__ = ["LoopDetector", "fingerprint", "fingerprints"]

_LOOP = StopReason.LOOP_DETECTED.value
_SUCCEEDED = ActionStatus.SUCCEEDED
#: Actions that ran or are running; proposed, pending and rejected ones never did.
_EXECUTED = frozenset(
    {
        ActionStatus.REQUESTED,
        ActionStatus.STARTED,
        ActionStatus.SUCCEEDED,
        ActionStatus.FAILED,
        ActionStatus.UNKNOWN,
    }
)


def fingerprint(tool: str, arguments: Mapping[str, Any], state: int) -> str:
    """`sha256:...` of a call and the observable state it was made in.

    Args:
        tool: the tool's name.
        arguments: the call's arguments (canonicalised: key order and number spelling do
            not matter).
        state: the run's observation count when the call was requested.
    """
    return digest({"tool": tool, "arguments": arguments, "state": state})


def fingerprints(record: RunRecord) -> tuple[tuple[str, str], ...]:
    """`(action_id, fingerprint)` of every executed action of the run, in ledger order.

    The reference definition `LoopDetector` implements incrementally; handy for audits and
    for explaining a refusal.
    """
    out = []
    last: dict[str, Any] = {}
    state = 0
    for action in record.actions.values():
        if action.status not in _EXECUTED:
            continue
        out.append((action.action_id, fingerprint(action.tool, action.arguments, state)))
        if action.status == _SUCCEEDED:
            if action.tool not in last or not same_json(last[action.tool], action.result):
                state += 1
            last[action.tool] = action.result
    return tuple(out)


def _polling(value: Mapping[str, int]) -> Mapping[str, int]:
    for tool, limit in value.items():
        if limit.__class__ is not int or limit < 1:
            raise ValueError(f"poll limit of '{tool}' must be an integer >= 1, got {limit!r}")
    return MappingProxyType(dict(value))


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: int) -> None:
    if value.__class__ is not int or value < 2:
        raise ValueError(f"{attribute.name} must be an integer >= 2, got {value!r}")


@attrs.frozen
class LoopDetector:
    """Refuses a `tool.requested` that repeats a call with no new observation in between.

    Attributes:
        threshold: the number of actions with one fingerprint that trips (>= 2).
        window: how many of the latest executed actions, this one included, are looked at
            (>= threshold).
        polling: tool name -> how many times in a row it may be called with an unchanged
            result (its poll limit); its window is at least poll limit + 1.
        name: the edge label (`loop_detected`).
    """

    threshold: int = attrs.field(default=3, validator=_positive)
    window: int = attrs.field(default=10, validator=_positive)
    polling: Mapping[str, int] = attrs.field(factory=dict, converter=_polling)
    name: str = attrs.field(default=_LOOP, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.window < self.threshold:
            raise ValueError(
                f"window ({self.window}) must be at least threshold ({self.threshold}): "
                "a smaller window could never hold enough repeats"
            )

    def check(self, record: RunRecord, event: Event, ctx: GuardContext) -> Verdict | None:
        """Refuse the request when it would complete a loop."""
        if not isinstance(event, ToolRequested):
            return None
        tool = event.tool
        poll = self.polling.get(tool)
        if poll is None:
            allowed, window = self.threshold - 1, self.window
        else:
            allowed, window = poll, max(self.window, poll + 1)
        recent, before = _recent(record, event.action_id, window - 1)
        previous = _previous_results(recent, before)
        arguments = event.arguments
        repeats = 0
        for i, action in enumerate(recent):
            if action.status == _SUCCEEDED and _changed(action, previous[i]):
                break  # a new observation since then: earlier repeats are progress
            if action.tool == tool and same_json(action.arguments, arguments):
                repeats += 1
                if repeats >= allowed:
                    return self._verdict(tool, repeats + 1, poll, window)
        return None

    def _verdict(self, tool: str, times: int, poll: int | None, window: int) -> Verdict:
        if poll is None:
            detail = (
                f"'{tool}' requested {times} times with the same arguments and no new "
                f"observation within the last {window} actions"
            )
        else:
            detail = f"'{tool}' polled {times} times with an unchanged result (poll limit {poll})"
        return Verdict(self.name, _LOOP, detail)


_NOTHING = object()


def _recent(record: RunRecord, exclude: str, n: int) -> tuple[list[Action], Iterator[Action]]:
    """The latest `n` executed actions, newest first, and the earlier ones, newest first.

    The earlier ones stay an iterator: `_previous_results` reads only as far back as it must.
    """
    recent: list[Action] = []
    # The ledger is a dict (insertion-ordered); walking it backwards needs no copy.
    rest = reversed(cast("dict[str, Action]", record.actions).values())
    for action in rest:
        if action.status in _EXECUTED and action.action_id != exclude:
            recent.append(action)
            if len(recent) == n:
                break
    return recent, rest


def _previous_results(recent: list[Action], before: Iterator[Action]) -> list[Any]:
    """For each action of `recent`, the result of the previous success of its tool."""
    wanted = {a.tool for a in recent if a.status == _SUCCEEDED}
    last: dict[str, Any] = {}
    for action in before:  # newest first: the first success seen per tool is the latest
        if not wanted:
            break
        if action.status == _SUCCEEDED and action.tool in wanted:
            last[action.tool] = action.result
            wanted.discard(action.tool)
    previous: list[Any] = [_NOTHING] * len(recent)
    for i in range(len(recent) - 1, -1, -1):  # oldest first
        action = recent[i]
        previous[i] = last.get(action.tool, _NOTHING)
        if action.status == _SUCCEEDED:
            last[action.tool] = action.result
    return previous


def _changed(action: Action, previous: Any) -> bool:
    return previous is _NOTHING or not same_json(previous, action.result)
