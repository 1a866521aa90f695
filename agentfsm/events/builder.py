"""Write a run's log without counting: `LogBuilder` numbers sequences and stamps times.

For tests, examples and adapters that produce events: every event it makes is validated
like any input, so a builder cannot write what a reader would refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from agentfsm.events.codec import parse_event
from agentfsm.events.models import Event
from agentfsm.events.vocabulary import BUILTIN_EVENTS, EventTypes

__all__ = ["LogBuilder", "step_clock"]


def step_clock(
    start: datetime = datetime(2026, 9, 1, 10, 0, tzinfo=UTC),
    step: timedelta = timedelta(seconds=1),
) -> Callable[[], datetime]:
    """A deterministic clock that advances by `step` on every call (for tests and examples)."""
    now = start - step

    def tick() -> datetime:
        nonlocal now
        now += step
        return now

    return tick


class LogBuilder:
    """Builds one run's events with contiguous sequences and clock timestamps.

    Args:
        run_id: the run every event names.
        clock: returns an aware datetime for each event (a `step_clock()` by default).
        start: the first sequence (1 for a new run; `version + 1` to continue one).
        events: the event types it may write (a table's `events` for its own types).
    """

    def __init__(
        self,
        run_id: str,
        *,
        clock: Callable[[], datetime] | None = None,
        start: int = 1,
        events: EventTypes = BUILTIN_EVENTS,
    ) -> None:
        if start < 1:
            raise ValueError(f"sequences start at 1, not {start}")
        self.run_id = run_id
        self.events: list[Event] = []
        self._clock = clock or step_clock()
        self._next = start
        self._types = events

    def add(self, type: str, /, **fields: Any) -> Event:
        """Validate and append one event of `type` with its own `fields`; returns it."""
        event = parse_event(
            {
                "type": type,
                "run_id": self.run_id,
                "sequence": self._next,
                "occurred_at": self._clock().isoformat(),
                **fields,
            },
            events=self._types,
        )
        self.events.append(event)
        self._next += 1
        return event
