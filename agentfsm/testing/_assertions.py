"""Assert that a log is legal under a table, with a failure that shows where and why.

Needs neither pytest nor Hypothesis: use it in any test runner, or through the pytest
plugin's `assert_legal_log` fixture.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from agentfsm.errors import AgentFSMError, EventFormatError, LifecycleError
from agentfsm.events.codec import dump_event, parse_event
from agentfsm.events.models import Event
from agentfsm.events.vocabulary import EventTypes
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer

__all__ = ["IllegalLogError", "Step", "assert_legal_log", "render_path"]

#: How many steps of the path a failure shows (the last ones: they led to the refusal).
_SHOWN = 12

#: What a log may hold: validated events, dicts, or JSON lines.
LogItem = Event | Mapping[str, Any] | str | bytes


@attrs.frozen
class Step:
    """One applied event of a path: its sequence, type, and the states before and after."""

    sequence: int
    event: str
    source: str
    target: str


class IllegalLogError(AgentFSMError, AssertionError):
    """A log the table (or the wire format) refuses.

    An `AssertionError` so that test runners report it as a failed assertion; it stays in the
    testing kit, not in `agentfsm.errors`, because it holds and renders the kit's `Step`s and
    the offending `Event` (types of higher layers than the errors module).

    Attributes:
        table: the table's name.
        position: the 1-based position of the offending item in the log (0: the log is empty).
        total: how many items the log has.
        path: the steps applied before the offending item.
        event: the offending event, when it could be read.
        error: what refused it (`LifecycleError` or `EventFormatError`), None for an empty log.
    """

    def __init__(
        self,
        *,
        table: str,
        position: int,
        total: int,
        path: tuple[Step, ...],
        event: Event | None,
        error: LifecycleError | EventFormatError | None,
    ) -> None:
        self.table = table
        self.position = position
        self.total = total
        self.path = path
        self.event = event
        self.error = error
        super().__init__(self._render())

    def _render(self) -> str:
        if self.error is None:
            return f"log is not legal under table '{self.table}': it is empty"
        what = "is refused" if self.event is not None else "is not a valid event"
        lines = [
            f"log is not legal under table '{self.table}': "
            f"event {self.position} of {self.total} {what}",
            f"  {self.error}",
            "path so far:",
            render_path(self.path[-_SHOWN:]) if self.path else "  (none: it is the first event)",
        ]
        if len(self.path) > _SHOWN:
            lines.insert(3, f"  ... {len(self.path) - _SHOWN} earlier events")
        if self.event is not None:
            lines += ["offending event:", f"  {dump_event(self.event)}"]
        return "\n".join(lines)


def render_path(path: Iterable[Step]) -> str:
    """The steps of a path, one line each: sequence, event type, `source -> target`."""
    return "\n".join(f"  {s.sequence:>4}  {s.event:<22} {s.source} -> {s.target}" for s in path)


def assert_legal_log(
    events: Iterable[LogItem], table: TransitionTable | Reducer = DEFAULT_TABLE
) -> RunRecord:
    """The record a log folds to, or `IllegalLogError` showing the offending event and path.

    Args:
        events: the log, as validated events, dicts, or JSON lines (parsed on the way).
        table: the transition table, or a `Reducer` (to use its table and its checks).
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this helper's
    reducer = table if isinstance(table, Reducer) else Reducer(table)
    items = list(events)
    name = reducer.table.name
    path: list[Step] = []
    record: RunRecord | None = None
    for position, item in enumerate(items, start=1):
        try:
            event = _as_event(item, position, reducer.table.event_types)
        except EventFormatError as exc:
            raise _failure(name, position, items, path, None, exc) from None
        before = record or reducer.initial(event.run_id)
        try:
            record = reducer.reduce(before, event)
        except LifecycleError as exc:
            raise _failure(name, position, items, path, event, exc) from None
        path.append(Step(event.sequence, event.type, before.status, record.status))
    if record is None:
        raise IllegalLogError(table=name, position=0, total=0, path=(), event=None, error=None)
    return record


def _as_event(item: LogItem, position: int, events: EventTypes) -> Event:
    if isinstance(item, str | bytes | Mapping):
        return parse_event(item, line=position, events=events)
    return item


def _failure(
    table: str,
    position: int,
    items: list[LogItem],
    path: list[Step],
    event: Event | None,
    error: LifecycleError | EventFormatError,
) -> IllegalLogError:
    return IllegalLogError(
        table=table,
        position=position,
        total=len(items),
        path=tuple(path),
        event=event,
        error=error,
    )
