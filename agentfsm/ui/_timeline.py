"""A run's timeline as a reviewer reads it: events grouped by turn, with each model call, tool
call and wait for a person drawn as a bar over the turn's span, times relative to the run's
start, and what changed in the record between two events.

Works on one page of events (the run page's 100): a bar whose end is on a later page runs
to the end of its turn on this page and says so. Nothing here reads the store.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import attrs

from agentfsm.events.models import parse_timestamp
from agentfsm.record import RunRecord

__all__ = ["CHANGES_SHOWN", "record_changes", "relative", "turn_groups"]

#: Fields (and calls of the ledger) a "what changed" lists by name; the rest are counted.
CHANGES_SHOWN = 20

#: The events that open a bar, and its kind (closed by `_OPENS_ENDS` naming the same call).
_OPENS = {
    "model.started": "model",
    "tool.started": "tool",
    "approval.requested": "wait",
    "run.paused": "wait",
}


def relative(seconds: float) -> str:
    """`+2.4 s`, `+3 min 5 s`, `+2 h 4 min`: a time since the run began."""
    if seconds < 60:
        return f"+{seconds:.1f} s" if seconds < 10 else f"+{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"+{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"+{hours} h {minutes} min" if hours < 48 else f"+{hours // 24} d {hours % 24} h"


def _duration(seconds: float) -> str:
    return relative(seconds)[1:]


def _at(text: str | None) -> datetime | None:
    try:
        return parse_timestamp(text) if text else None
    except ValueError:
        return None


def turn_groups(
    rows: Sequence[dict[str, Any]], started_at: str | None, turns_before: int = 0
) -> list[dict[str, Any]]:
    """`rows` (the page's timeline rows: `sequence`, `type`, `occurred_at`, `fields`,
    `action_id`) grouped by turn (a turn begins at `model.started`), each row given
    `relative` (since `started_at`), each group its `bars`: model call, tool calls, waits for
    a person, each with `left`/`width` in percent of the group's span, `took` and, for a
    model call, the tokens and cost it reported. `turns_before`: the turns the run had begun
    before the page's first event (so turns are numbered as the run counts them)."""
    origin = _at(started_at)
    groups: list[dict[str, Any]] = []
    turn = turns_before
    for row in rows:
        when = _at(row["occurred_at"])
        row["when"] = when
        row["relative"] = relative((when - origin).total_seconds()) if when and origin else ""
        if row["type"] == "model.started" or not groups:
            turn += row["type"] == "model.started"
            groups.append({"turn": turn, "rows": [], "bars": []})
        groups[-1]["rows"].append(row)
    for group in groups:
        _bars(group)
    return groups


def _bars(group: dict[str, Any]) -> None:
    rows = group["rows"]
    times = [r["when"] for r in rows if r["when"] is not None]
    if not times:
        return
    first, last = min(times), max(times)
    span = (last - first).total_seconds()
    group["took"] = _duration(span)
    group["first_seq"], group["last_seq"] = rows[0]["sequence"], rows[-1]["sequence"]
    open_bars: dict[tuple[str, str | None], dict[str, Any]] = {}
    for row in rows:
        kind = _OPENS.get(row["type"])
        if kind is not None:
            label = _bar_label(kind, row)
            bar = {"kind": kind, "label": label, "start": row["when"], "end": None,
                   "from_seq": row["sequence"], "to_seq": None, "usage": None}  # fmt: skip
            group["bars"].append(bar)
            open_bars[(kind, row["action_id"])] = bar
            continue
        for (opened, action), bar in list(open_bars.items()):
            if row["type"] in _OPENS_ENDS[opened] and (
                action is None or action == row["action_id"]
            ):
                bar["end"], bar["to_seq"] = row["when"], row["sequence"]
                if row["type"] in ("model.completed", "model.failed"):
                    bar["usage"] = row["fields"].get("usage")
                if row["type"] == "model.failed":
                    bar["label"] += " — failed"
                if row["type"] in ("approval.accepted", "approval.rejected"):
                    bar["label"] += f" — {row['type'].split('.')[1]}"
                    who = row["fields"].get("approver")
                    if who:
                        bar["label"] += f" by {who}"
                del open_bars[(opened, action)]
                break
    for bar in group["bars"]:
        start, end = bar["start"], bar["end"]
        bar["open"] = end is None
        end = end or last
        if start is None:
            start = first
        offset = (start - first).total_seconds()
        length = max((end - start).total_seconds(), 0.0)
        bar["left"] = round(100 * offset / span, 2) if span else 0.0
        bar["width"] = max(round(100 * length / span, 2), 0.8) if span else 100.0
        bar["took"] = _duration(length) + (
            " so far (not ended by the last event on this page)" if bar["open"] else ""
        )


#: The closing events of each kind of bar.
_OPENS_ENDS = {
    "model": ("model.completed", "model.failed"),  # a failed attempt ends its call too
    "tool": ("tool.completed", "tool.failed", "tool.outcome_unknown"),
    "wait": ("approval.accepted", "approval.rejected", "run.resumed", "run.cancel_requested",
             "run.cancelled"),
}  # fmt: skip


def _bar_label(kind: str, row: dict[str, Any]) -> str:
    if kind == "model":
        return "model call"
    if kind == "tool":
        return f"tool {row.get('tool') or row['action_id'] or ''}".strip()
    if row["type"] == "run.paused":
        return f"paused: {row['fields'].get('reason') or 'waiting'}"
    return f"waiting for a person on {row['action_id']}"


def record_changes(before: RunRecord | None, after: RunRecord) -> dict[str, Any]:
    """What differs between two records of one run: each top-level field that changed
    (`field`, `before`, `after`), and the calls of the ledger that were added or changed,
    the first `CHANGES_SHOWN` of each by name and the rest counted."""
    # The ledger is compared call by call (shared, unchanged calls are the same object), so
    # the record's JSON is built without it.
    new = _without_ledger(after)
    old = _without_ledger(before) if before is not None else {}
    fields = [
        {"field": k, "before": old.get(k), "after": new.get(k)}
        for k in dict.fromkeys([*old, *new])
        if old.get(k) != new.get(k)
    ]
    ledger_before = before.actions if before is not None else {}
    calls: list[dict[str, Any]] = []
    changed = 0
    for action_id, action in after.actions.items():
        was = ledger_before.get(action_id)
        if was is action or was == action:
            continue
        changed += 1
        if len(calls) < CHANGES_SHOWN:
            then = was.to_json() if was is not None else {}
            now = action.to_json()
            calls.append({
                "action_id": action_id,
                "added": was is None,
                "fields": {k: (then.get(k), now[k]) for k in now if then.get(k) != now[k]},
            })  # fmt: skip
    return {
        "fields": fields[:CHANGES_SHOWN],
        "fields_more": max(len(fields) - CHANGES_SHOWN, 0),
        "calls": calls,
        "calls_more": changed - len(calls),
    }


def _without_ledger(record: RunRecord) -> dict[str, Any]:
    data: dict[str, Any] = attrs.evolve(record, actions={}).to_json()
    data.pop("actions", None)
    return data
