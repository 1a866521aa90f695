"""What pages say about a run in words: why it stopped, how much of its limits it used.

Pure functions of a record, shared by the server's pages and the report file. Each one is
bounded whatever the run holds: a model can propose thousands of calls in one decision and
make any argument or result megabytes, so lists of calls are named up to a few and counted
past that, and JSON is cut to a budget of characters (`clipped`) before it reaches a page.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
from typing import Any

import attrs

from agentfsm.fsm.table import TransitionTable
from agentfsm.names import RunStatus, StateKind
from agentfsm.record import RunRecord

__all__ = [
    "JSON_BUDGET",
    "MAX_LISTED",
    "NAMED",
    "RECORD_BUDGET",
    "RECORD_VIEW_ACTIONS",
    "SUMMARY_ROWS",
    "TEXT_BUDGET",
    "BatchSummary",
    "Meter",
    "batch_summary",
    "clip",
    "clipped",
    "named",
    "pretty_clipped",
    "pretty_json",
    "record_view",
    "stop_words",
    "usage_meters",
]

#: Characters of JSON a page shows of one value (an event's fields, a call's arguments, a
#: result) before cutting it; what is cut is counted where it was.
JSON_BUDGET = 4_000
#: Characters of the record shown after a step: its ledger is cut to a few calls already,
#: this bounds the values in it (a final output, a tool's facts), which a report repeats on
#: every step it lists.
RECORD_BUDGET = 8_000
#: Calls of the ledger the record shown after a step carries (the step's own call first,
#: then waiting calls, then the batch); `/run/record.json` has the whole ledger.
RECORD_VIEW_ACTIONS = 5
#: Characters of free text (an objective, a reason, an error's message) a page shows.
TEXT_BUDGET = 2_000
#: Lines (a log's unreadable lines, the runs a report leaves out) a page lists before it
#: counts the rest.
MAX_LISTED = 50
#: Ids a sentence names before it counts the rest.
NAMED = 5
#: (tool, status) pairs a batch summary counts one by one before it adds up the rest.
SUMMARY_ROWS = 10

_GUARDS = {
    "max_turns": "the turn limit was reached",
    "deadline": "its deadline passed",
    "budget": "its token or cost budget would have been exceeded",
    "loop_detected": "it repeated the same call without new observations (a loop)",
}


def stop_words(record: RunRecord, table: TransitionTable) -> str:
    """Where the run stands, in a sentence: why it ended, or what it waits for (the free
    text in it, a reason or an error's message, cut to `TEXT_BUDGET` characters).

    Whether it ended, waits or is paused is read from the kind of its state in `table` (the
    run's table), never from the state's name, so a lifecycle's own states read like the
    built-in ones of their kind; a state of its own says what it is by its description.
    """
    return clip(_stop_words(record, table))


def _stop_words(record: RunRecord, table: TransitionTable) -> str:
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
    waiting = record.pending_approvals
    if waiting:
        calls = "" if len(waiting) <= NAMED else f"{len(waiting):,} calls: "
        return f"Waiting for a decision on {calls}{named(waiting)}."
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


def named(ids: Sequence[str], shown: int = NAMED) -> str:
    """`a, b, c and 997 more`: the first `shown` of `ids`, and how many are left unnamed."""
    listed = ", ".join(ids[:shown])
    rest = len(ids) - shown
    return f"{listed} and {rest:,} more" if rest > 0 else listed


def clip(text: Any, budget: int = TEXT_BUDGET) -> str:
    """`text` (made a string) cut to `budget` characters, ending `… (N more characters)`."""
    value = text if isinstance(text, str) else str(text)
    return value if len(value) <= budget else str(_clip(value, [budget + 2, 0], 0))


def pretty_json(value: Any, budget: int = JSON_BUDGET) -> str:
    """Indented JSON for a page, cut to about `budget` characters (see `clipped`); escaped by
    the template like every other text."""
    return pretty_clipped(value, budget)[0]


def pretty_clipped(
    value: Any, budget: int = JSON_BUDGET, *, plain: bool = False
) -> tuple[str, bool]:
    """`pretty_json`'s text, and whether it cut anything (one walk for both).

    `plain`: `value` is JSON as a JSON-mode dump makes it (mappings are dicts with string
    keys). Such a value whose whole indented JSON fits `budget` is then dumped once and not
    walked first: the walk would cut nothing, since it charges each string, key, item and
    scalar at most the characters its indented JSON takes, so it never spends more than the
    whole text's length (a timeline page dumps 100 events' fields).
    """
    if plain:
        text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
        if len(text) <= budget:
            return text, False
    shown, cut = clipped(value, budget)
    return json.dumps(shown, indent=2, ensure_ascii=False, sort_keys=True, default=str), cut


def clipped(value: Any, budget: int = JSON_BUDGET) -> tuple[Any, bool]:
    """`value` cut to about `budget` characters of indented JSON, and whether anything was cut.

    What is cut says so where it was: a string ends `… (N more characters)`, a list's last
    item is `… N more items`, a mapping's last key is `…` (`N more keys`). The walk stops
    when the budget is spent, so its cost is the budget's, not the value's: a page never
    serializes the megabyte it will not show. Each item is charged its indentation too, so a
    deeply nested value is cut before its indentation alone grows past the budget.
    """
    left = [budget, 0]  # characters left; 1 once something was cut
    shown = _clip(value, left, 0)
    return shown, left[1] == 1


def _clip(value: Any, left: list[int], depth: int) -> Any:
    if isinstance(value, str):
        room = left[0] - 2
        if len(value) <= max(room, 0):
            left[0] -= len(value) + 2
            return value
        keep = max(room, 0)
        left[:] = [-1, 1]
        return f"{value[:keep]}… ({len(value) - keep:,} more characters)"
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for done, (key, item) in enumerate(value.items()):
            if left[0] <= 0:
                out["…"] = f"{len(value) - done:,} more keys"
                left[:] = [-1, 1]
                break
            name = str(key)
            left[0] -= len(name) + 2 * depth + 6
            out[name] = _clip(item, left, depth + 1)
        return out
    if isinstance(value, list | tuple):
        items: list[Any] = []
        for done, item in enumerate(value):
            if left[0] <= 0:
                items.append(f"… {len(value) - done:,} more items")
                left[:] = [-1, 1]
                break
            left[0] -= 2 * depth + 4
            items.append(_clip(item, left, depth + 1))
        return items
    left[0] -= len(json.dumps(value, default=str))
    return value


def record_view(record: RunRecord, about: str | None = None) -> dict[str, Any]:
    """The record as JSON for a person to read after a step: whole for a small run; for a
    large one, its ledger cut to `RECORD_VIEW_ACTIONS` calls (`about`, the step's own call,
    first; then the waiting calls, then the batch) and its lists of ids cut likewise, each
    cut counted (`actions_not_shown`, `batch_not_shown`, `pending_not_shown`).

    Only the calls kept are serialized, so a step costs the same in a run of ten calls or of
    ten thousand (the report carries one of these per step).
    """
    actions = record.actions
    if len(actions) <= RECORD_VIEW_ACTIONS:
        return record.to_json()
    waiting = record.pending_approvals
    wanted = [about] if about is not None else []
    wanted += [*islice(waiting, RECORD_VIEW_ACTIONS), *record.batch[:RECORD_VIEW_ACTIONS]]
    kept = {a: actions[a] for a in _first_unique(wanted, RECORD_VIEW_ACTIONS) if a in actions}
    data: dict[str, Any] = attrs.evolve(record, actions=kept).to_json()
    data["actions_not_shown"] = len(actions) - len(kept)
    for field, ids in (("batch", record.batch), ("pending_approvals", waiting)):
        data[field] = list(ids[:RECORD_VIEW_ACTIONS])
        if len(ids) > RECORD_VIEW_ACTIONS:
            short = "pending" if field == "pending_approvals" else field
            data[f"{short}_not_shown"] = len(ids) - RECORD_VIEW_ACTIONS
    return data


def _first_unique(ids: Iterable[str], limit: int) -> list[str]:
    out: dict[str, None] = {}
    for i in ids:
        out.setdefault(i)
        if len(out) == limit:
            break
    return list(out)


@attrs.frozen
class BatchSummary:
    """A batch in a few lines: how many calls, counted by tool and status.

    Attributes:
        total: calls in the batch.
        counts: `(tool, status, calls)`, most calls first, at most `SUMMARY_ROWS` of them.
        others: calls of the pairs past those rows, added up (0 when every pair is listed).
    """

    total: int
    counts: tuple[tuple[str, str, int], ...]
    others: int


def batch_summary(record: RunRecord) -> BatchSummary:
    """The current batch counted by (tool, status): one pass over the batch, whatever its
    size, and a summary of at most `SUMMARY_ROWS` rows."""
    actions = record.actions
    counts = Counter(
        (actions[a].tool, str(actions[a].status)) for a in record.batch if a in actions
    )
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    rows = tuple((tool, status, n) for (tool, status), n in ranked[:SUMMARY_ROWS])
    return BatchSummary(len(record.batch), rows, sum(n for _, n in ranked[SUMMARY_ROWS:]))
