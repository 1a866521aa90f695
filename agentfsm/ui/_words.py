"""What pages say about a run in words: why it stopped, how much of its limits it used.

Pure functions of a record, shared by the server's pages and the report file.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from agentfsm.fsm.table import TransitionTable
from agentfsm.names import RunStatus, StateKind
from agentfsm.record import RunRecord

__all__ = ["Meter", "pretty_json", "stop_words", "usage_meters"]

_GUARDS = {
    "max_turns": "the turn limit was reached",
    "deadline": "its deadline passed",
    "budget": "its token or cost budget would have been exceeded",
    "loop_detected": "it repeated the same call without new observations (a loop)",
}


def stop_words(record: RunRecord, table: TransitionTable) -> str:
    """Where the run stands, in a sentence: why it ended, or what it waits for.

    Whether it ended, waits or is paused is read from the kind of its state in `table` (the
    run's table), never from the state's name, so a lifecycle's own states read like the
    built-in ones of their kind; a state of its own says what it is by its description.
    """
    status = record.status
    if record.stop_reason is not None:
        why = _GUARDS.get(record.stop_reason, f"guard '{record.stop_reason}' stopped it")
        detail = f" ({record.stop_detail})" if record.stop_detail else ""
        return f"Terminated by a guard: {why}{detail}."
    if record.error is not None:
        return f"Failed: {record.error.kind}: {record.error.message}"
    # A state the table does not declare (a log folded with another version) reads as in
    # progress: nothing is claimed about it.
    known = status in table.state_names
    kind = table.kind(status) if known else None
    if kind == StateKind.TERMINAL:
        return _ended(record, table)
    if known and table.settles_cancel(status):
        return "Cancellation requested; calls in flight are being settled."
    if record.pending_approvals:
        return f"Waiting for a decision on {', '.join(record.pending_approvals)}."
    if kind == StateKind.PAUSED or record.pause_reason is not None:
        if record.pause_reason:
            return f"Paused: {record.pause_reason}."
        return f"Paused in '{status}'."
    if kind == StateKind.WAITING:
        return f"Waiting in '{status}'{_what(table, status, 'for a person')}."
    return f"In progress ('{status}')."


def _ended(record: RunRecord, table: TransitionTable) -> str:
    """How a run in a terminal state (neither failed nor stopped by a guard) ended: the
    default table's own ends in their words, any other by its description."""
    status = record.status
    if status == RunStatus.CANCELLED:
        why = f": {record.cancel_reason}" if record.cancel_reason else ""
        who = f" (asked by {record.cancel_requested_by})" if record.cancel_requested_by else ""
        return f"Cancelled{who}{why}."
    if status == RunStatus.COMPLETED:
        return "Completed: the final output was accepted."
    return f"Ended in '{status}'{_what(table, status)}."


def _what(table: TransitionTable, state: str, otherwise: str = "") -> str:
    """`: <the state's description>`, or ` <otherwise>` when it has none."""
    description = table.state(state).description.rstrip(".")
    if description:
        return f": {description}"
    return f" {otherwise}" if otherwise else ""


@attrs.frozen
class Meter:
    """One limit and how much of it the run used."""

    name: str
    used: float
    limit: float
    text: str

    @property
    def ratio(self) -> float:
        """Used over limit (may exceed 1 when a call overran)."""
        return self.used / self.limit if self.limit else 0.0


def usage_meters(record: RunRecord) -> list[Meter]:
    """A meter per limit the run has (turns, tokens, cost); none for an unlimited run."""
    limits = record.limits
    if limits is None:
        return []
    out: list[Meter] = []
    if limits.max_turns is not None:
        out.append(
            Meter("turns", record.turn, limits.max_turns, f"{record.turn} of {limits.max_turns}")
        )
    if limits.max_tokens is not None:
        used = record.usage.total_tokens
        text = f"{used:,} of {limits.max_tokens:,} tokens"
        if record.reserved_tokens:
            text += f" ({record.reserved_tokens:,} reserved)"
        out.append(Meter("tokens", used, limits.max_tokens, text))
    if limits.max_cost is not None:
        cost = record.usage.cost
        out.append(Meter("cost", cost, limits.max_cost, f"{cost:.4f} of {limits.max_cost:.4f}"))
    return out


def pretty_json(value: Any) -> str:
    """Indented JSON for a page (escaped by the template, like every other text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
