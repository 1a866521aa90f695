"""Two runs side by side: where their logs part, and how their records differ at the end.

`diff_runs` walks both logs together, folding each, and stops comparing at the first sequence
whose events differ once the run id and the times are set aside (`run_id`, `occurred_at`,
`event_id`): that is `diverges_at`. A fork (`agentfsm.runtime.control.fork`) shares its
source's first N events and differs from N + 1 on, where its `run.forked` stands; two runs of
one agent on one objective part where the first decision or result differs.

Both logs are read once, as streams: what is kept is the two records and, per side, the
events from `diverges_at` on, at most `limit` of them (the rest counted), so comparing two
long runs holds no more than a page of either.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from itertools import zip_longest
from typing import Any

import attrs

from agentfsm.events.codec import event_to_dict
from agentfsm.events.models import Event
from agentfsm.record import RunRecord, default_key
from agentfsm.reducers.reduce import Reducer

__all__ = ["RunDiff", "RunSide", "diff_runs"]

#: What is set aside when two events are compared: where and when, not what.
_ENVELOPE = ("run_id", "occurred_at", "event_id")
#: Record fields that are where or when, likewise set aside when two records are compared.
_RECORD_ENVELOPE = frozenset({"run_id", "started_at", "updated_at", "entered_at"})


@attrs.frozen
class RunSide:
    """One run of a `RunDiff`.

    Attributes:
        run_id: the run.
        events: its events from `diverges_at` on (at most the diff's `limit`).
        more: how many events after those the log holds.
        record: the run's record after its last event.
    """

    run_id: str
    events: tuple[Event, ...]
    more: int
    record: RunRecord


@attrs.frozen
class RunDiff:
    """How two runs differ (see `diff_runs`).

    Attributes:
        diverges_at: the first sequence whose events differ (one log may simply end before
            it); None when the logs hold the same events.
        a: the first run.
        b: the second run.
        differences: the record fields whose final values differ, sorted, each with its
            value in `a` and in `b` (None where a side lacks it). The run id and times are
            left out; a call of one ledger only is `actions.<action_id>`, a call of both is
            named by what differs in it (`actions.t1.status`), and its idempotency key is
            left out when it is the default one, which names the run.
    """

    diverges_at: int | None
    a: RunSide
    b: RunSide
    differences: Mapping[str, tuple[Any, Any]]

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the record fields that differ (`differences`' keys), sorted."""
        return tuple(self.differences)

    def to_json(self) -> dict[str, Any]:
        """`{"diverges_at", "fields", "a": {...}, "b": {...}}`; each side has its `run_id`,
        `events` (wire dicts), `more` and `record`: its values of the differing fields."""
        return {
            "diverges_at": self.diverges_at,
            "fields": list(self.fields),
            "a": self._side(self.a, 0),
            "b": self._side(self.b, 1),
        }

    def _side(self, side: RunSide, which: int) -> dict[str, Any]:
        return {
            "run_id": side.run_id,
            "events": [event_to_dict(e) for e in side.events],
            "more": side.more,
            "record": {name: pair[which] for name, pair in self.differences.items()},
        }


def diff_runs(
    a: Iterable[Event],
    b: Iterable[Event],
    *,
    reducer: Reducer | None = None,
    limit: int | None = 200,
) -> RunDiff:
    """Compare two runs' logs: where they diverge, and their final records' differences.

    Args:
        a: the first run's events, in order (a store's `events(run_id)`, a parsed log).
        b: the second run's.
        reducer: folds both logs (a reducer of the tables the runs are under); the default
            table's when not given.
        limit: the most events kept per side from `diverges_at` on (None: all of them).

    Raises:
        ValueError: a log is empty, or `limit` is negative.
        LifecycleError: a log is not one legal run of `reducer`'s table.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be at least 0, not {limit}")
    folding = reducer if reducer is not None else Reducer()
    left, right = _Fold(folding, "a"), _Fold(folding, "b")
    diverges_at: int | None = None
    for sequence, (x, y) in enumerate(zip_longest(a, b), start=1):
        if diverges_at is None and not _same(x, y):
            diverges_at = sequence
        keep = diverges_at is not None
        left.take(x, keep, limit)
        right.take(y, keep, limit)
    first, second = left.side(), right.side()
    differences = _differences(_comparable(first.record), _comparable(second.record))
    return RunDiff(diverges_at, first, second, differences)


def _comparable(record: RunRecord) -> dict[str, Any]:
    """The record's fields by name, the run id and times left out, its ledger's calls by
    `actions.<action_id>`, each with its idempotency key left out where it is the default one
    (which names the run)."""
    # Read back as plain JSON, so a value compares and prints as the wire has it ('succeeded',
    # not a StrEnum member).
    data = json.loads(json.dumps(record.to_json()))
    fields = {k: v for k, v in data.items() if k not in _RECORD_ENVELOPE and k != "actions"}
    for action_id, action in data["actions"].items():
        if action.get("idempotency_key") == default_key(record.run_id, action_id):
            action = {**action, "idempotency_key": None}
        fields[f"actions.{action_id}"] = action
    return fields


def _differences(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Each field whose values differ, with both; a call both ledgers hold, by what changed
    in it (`actions.t1.status`), so a reader sees the change, not two whole calls."""
    found: dict[str, tuple[Any, Any]] = {}
    for name in sorted(mine.keys() | theirs.keys()):
        x, y = mine.get(name), theirs.get(name)
        if x == y:
            continue
        if name.startswith("actions.") and isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(x.keys() | y.keys()):
                if x.get(key) != y.get(key):
                    found[f"{name}.{key}"] = (x.get(key), y.get(key))
        else:
            found[name] = (x, y)
    return found


def _same(x: Event | None, y: Event | None) -> bool:
    if x is None or y is None:
        return x is y
    return _content(x) == _content(y)


def _content(event: Event) -> dict[str, Any]:
    data = event_to_dict(event)
    for key in _ENVELOPE:
        data.pop(key, None)
    return data


class _Fold:
    """One side's fold, and what it keeps of its events past the divergence."""

    def __init__(self, reducer: Reducer, name: str) -> None:
        self._reducer = reducer
        self._name = name
        self._record: RunRecord | None = None
        self._kept: list[Event] = []
        self._more = 0

    def take(self, event: Event | None, keep: bool, limit: int | None) -> None:
        if event is None:
            return
        record = self._record if self._record is not None else self._reducer.initial(event.run_id)
        self._record = self._reducer.reduce(record, event)
        if keep:
            if limit is None or len(self._kept) < limit:
                self._kept.append(event)
            else:
                self._more += 1

    def side(self) -> RunSide:
        if self._record is None:
            raise ValueError(f"run {self._name} has no events to compare")
        return RunSide(self._record.run_id, tuple(self._kept), self._more, self._record)
