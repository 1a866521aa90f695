"""Timeouts: an edge taken by time alone, once a run has stood in its state that long.

`Transition("documents_requested", "loan.documents_expired", "declined",
after=timedelta(days=7))` is one edge like any other, with one condition: its event is legal
only once the run has stood in `documents_requested` for 7 days. The time is counted from
the event that entered the state (`RunRecord.entered_at`); an edge that leaves the state and
one that comes back restarts it, an edge that stays in the state does not (as XState's `after`
on a self-transition that does not re-enter). A log whose expiry comes early is refused,
naming when it falls due.

The runtime appends the event by itself when the time comes, with no fields of its own: the
reducer notes on the record when the run's next timeout falls due (`RunRecord.timeout`), the
drivers' timers wake the run then (`agentfsm.runtime._wakeups`), and the Runner appends it
(`Planner.overdue`). So an edge with `after=` takes no other condition, and its event type
must be one that can be built with no fields (the table refuses either, by name).

This module holds what the declaration needs of time: the condition's predicate
(`Elapsed`), the words diagrams and errors say a duration in (`duration_words`: `7 d`), the
due time (`due_at`) and the table's problems with timed edges (`timeout_problems`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol

import attrs
from pydantic import ValidationError

from agentfsm.events.models import parse_timestamp

if TYPE_CHECKING:
    from agentfsm.events.vocabulary import EventTypes


class _Edge(Protocol):
    """What `timeout_problems` reads of a `Transition` (which is declared with this module's
    `Elapsed`, so this module does not import it)."""

    @property
    def source(self) -> str: ...
    @property
    def event(self) -> str: ...
    @property
    def target(self) -> str: ...
    @property
    def after(self) -> timedelta | None: ...


__all__ = ["Elapsed", "due_at", "duration_words", "seconds", "timeout_problems"]

_UNITS = (("d", 86_400), ("h", 3_600), ("min", 60))
_MICROSECONDS = timedelta(microseconds=1)


def duration_words(after: timedelta) -> str:
    """A duration as diagrams and messages say it: `7 d`, `1 d 12 h`, `1 min 30 s`, `0.5 s`."""
    whole, fraction = divmod(after // _MICROSECONDS, 1_000_000)
    parts = []
    for unit, size in _UNITS:
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count} {unit}")
    if whole or fraction or not parts:
        text = str(whole) if not fraction else f"{whole}.{fraction:06d}".rstrip("0")
        parts.append(f"{text} s")
    return " ".join(parts)


def seconds(after: timedelta) -> int | float:
    """`after` in seconds, as a table's description writes it (whole seconds as an integer)."""
    value = after.total_seconds()
    return int(value) if value.is_integer() else value


def due_at(entered_at: str, after: timedelta) -> str:
    """When a timeout of `after` falls due for a run that entered its state at `entered_at`
    (RFC 3339, in `entered_at`'s offset)."""
    return (parse_timestamp(entered_at) + after).isoformat()


@attrs.frozen
class Elapsed:
    """The predicate of an edge declared with `after=`: the run has stood in its state that
    long when the event occurs.

    Attributes:
        after: how long.
    """

    after: timedelta

    def __call__(self, record: Any, event: Any) -> bool:
        # No record (a bare `table.step`), or one that never entered its state: no time to
        # count from, so the edge is not taken.
        entered = getattr(record, "entered_at", None)
        if entered is None:
            return False
        return parse_timestamp(event.occurred_at) >= parse_timestamp(entered) + self.after


def timeout_problems(
    initial: str, transitions: Sequence[_Edge], events: EventTypes | None
) -> list[str]:
    """Why the timed edges among `transitions` cannot be declared so, one sentence each."""
    problems: list[str] = []
    timed: dict[tuple[str, str], list[_Edge]] = {}
    for t in transitions:
        if t.after is None:
            continue
        edge = f"edge {t.source} --{t.event}--> {t.target} waits {duration_words(t.after)}"
        timed.setdefault((t.source, t.event), []).append(t)
        if t.source == t.target:
            problems.append(
                f"{edge} and stays in '{t.source}': a timeout must leave its state (the time "
                "is counted from entering it, so it would fall due again at once)"
            )
        if t.source == initial:
            problems.append(
                f"{edge} in the initial state '{initial}', which no event enters: there is "
                "no time to count from"
            )
        if events is not None and t.event in events:
            missing = _unbuildable(events.classes[t.event], t.event)
            if missing is not None:
                problems.append(
                    f"{edge}, so the runtime appends '{t.event}' by itself, with no fields: "
                    f"{missing}"
                )
    for (source, event), edges in timed.items():
        if len(edges) > 1:
            waits = ", ".join(duration_words(e.after) for e in edges if e.after is not None)
            problems.append(
                f"'{source}' on '{event}': {len(edges)} edges wait ({waits}); a state times "
                "out on one event once: give the others events of their own"
            )
    return problems


def _unbuildable(cls: type[Any], name: str) -> str | None:
    """Why `cls` cannot be built from its envelope alone (None when it can)."""
    try:
        cls.model_validate(
            {"run_id": "r", "sequence": 1, "occurred_at": "2026-01-01T00:00:00Z", "type": name}
        )
    except ValidationError as exc:
        errors = exc.errors()
        missing = [".".join(map(str, e["loc"])) for e in errors if e["type"] == "missing"]
        if missing:
            fields = ", ".join(f"'{f}'" for f in missing)
            return f"it requires {fields} (give {'it' if len(missing) == 1 else 'them'} a default)"
        return f"it cannot be built without fields ({errors[0]['msg']})"
    return None
