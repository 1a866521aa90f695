"""`LogSource`: the runs of a JSON Lines log file, for `agentfsm ui --log`.

The log is read into a memory store up to the first event of each run the lifecycle
refuses; the refusal is kept beside it, with what the table would have allowed, for the run
page to show where the log broke.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs

from agentfsm.diagrams._trajectory import Refusal
from agentfsm.errors import AgentFSMError, EventFormatError, LifecycleError
from agentfsm.events._lines import is_blank, iter_lines
from agentfsm.events.codec import parse_event
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.registry import known_tables
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores.base import EventStore, StoreOptions
from agentfsm.stores.memory import MemoryEventStore, MemoryStorage
from agentfsm.ui._source import Source

__all__ = ["LogSource"]


class LogSource(Source):
    """The runs of a JSON Lines log, each read up to the first event its lifecycle refuses.

    Args:
        path: the log file.
        table: the table the log's runs are under (the default table unless given).

    Raises:
        EventFormatError: a line is too long or not UTF-8 (`agentfsm.events._lines`): the
            rest of the log cannot be read, so none of it is served.
    """

    def __init__(self, path: Path, table: TransitionTable = DEFAULT_TABLE) -> None:
        storage = MemoryStorage()
        tables = [table, *(t for t in known_tables() if t.digest != table.digest)]

        def opener(t: TransitionTable) -> EventStore:
            options = StoreOptions(reducer=Reducer(t, tables=tables))
            return MemoryEventStore(storage, options=options)

        refusals = _load_log(path, table, opener(table))
        self.problems: tuple[str, ...] = refusals.pop("", (None, ()))[1]
        super().__init__(
            opener, tables=[table], refusals={k: v for k, v in refusals.items() if v[0]},
            label=str(path),
        )  # fmt: skip


def _load_log(
    path: Path, table: TransitionTable, store: EventStore
) -> dict[str, tuple[Any, tuple[str, ...]]]:
    """Append each run's events to `store` up to its first refused event or unreadable line;
    return the refusals by run id (and, under "", lines that name no run)."""
    runs: dict[str, list[Event]] = {}
    broken: dict[str, tuple[Any, tuple[str, ...]]] = {}
    stray: list[str] = []
    with path.open("rb") as handle:
        for number, raw in enumerate(iter_lines(handle), start=1):
            if is_blank(raw):
                continue
            try:
                event = parse_event(raw, line=number, events=table.event_types)
            except EventFormatError as exc:
                if exc.run_id is None:
                    stray.append(str(exc))
                elif exc.run_id not in broken:
                    refusal = Refusal("?", str(exc), exc.sequence, None, number)
                    broken[exc.run_id] = (refusal, ())
                    runs.setdefault(exc.run_id, [])
                continue
            if event.run_id not in broken:
                runs.setdefault(event.run_id, []).append(event)
    reducer = store.reducer
    for run_id, events in runs.items():
        record = reducer.initial(run_id)
        good: list[Event] = []
        for event in events:
            try:
                record = reducer.reduce(record, event)
            except AgentFSMError as exc:
                message = exc.reason if isinstance(exc, LifecycleError) else str(exc)
                refusal = Refusal(record.status, message, event.sequence, event.type)
                broken[run_id] = (refusal, table.allowed(record.status))
                break
            good.append(event)
        else:
            if run_id in broken:  # an unreadable line after the good ones: now the state is known
                old = broken[run_id][0]
                refusal = attrs.evolve(old, state=record.status)
                broken[run_id] = (refusal, table.allowed(record.status))
        if not good:  # not even its first event could be stored: listed with the log's problems
            refusal = broken.pop(run_id)[0]
            stray.append(f"run '{run_id}': {refusal.message}")
            continue
        for start in range(0, len(good), 500):
            store.append(run_id, good[start : start + 500], start)
    broken[""] = (None, tuple(stray))
    return broken
