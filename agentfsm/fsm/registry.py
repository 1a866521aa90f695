"""Where the tables a store's runs were started under are found again.

Each run records its table's name and digest on `run.started` (`TransitionTable.ref`). To
load, steer or draw a run, tools need that table back, without being told: they look it up
here, by digest. A table is known when it is the default table, was `register`ed in this
process, or is published by an installed package under the entry point group
`agentfsm.tables` (each entry names a `TransitionTable`, or an iterable of them: every
version still in use)::

    [project.entry-points."agentfsm.tables"]
    support_ticket = "myapp.lifecycle:TICKET_TABLES"

Old versions stay registered as long as runs started under them may still be loaded.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from importlib.metadata import entry_points

from agentfsm.errors import UnknownTableError
from agentfsm.events.models import TableRef
from agentfsm.fsm.default import DEFAULT_TABLE, EARLIER_DEFAULT_TABLES
from agentfsm.fsm.table import TransitionTable

__all__ = ["ENTRY_POINT_GROUP", "known_tables", "lookup", "register"]

#: The entry point group packages publish their tables under.
ENTRY_POINT_GROUP = "agentfsm.tables"

_lock = threading.Lock()
_registered: dict[str, TransitionTable] = {
    t.digest: t for t in (DEFAULT_TABLE, *EARLIER_DEFAULT_TABLES)
}


def register(*tables: TransitionTable) -> None:
    """Make `tables` known to `lookup` in this process (idempotent)."""
    with _lock:
        for table in tables:
            _registered[table.digest] = table


def _published() -> Iterable[TransitionTable]:
    return _read_published()


@functools.cache
def _read_published() -> tuple[TransitionTable, ...]:
    # Read once per process: scanning every installed distribution's metadata costs ~70 ms
    # in this project's environment, and `agentfsm ui` asked on every page (the runs list
    # twice), so each answer took 70-200 ms of CPU before its own work (issue 32). What is
    # installed does not change under a running process; a failing load is not cached.
    found: list[TransitionTable] = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        value = entry.load()
        if isinstance(value, TransitionTable):
            found.append(value)
        else:
            found.extend(t for t in value if isinstance(t, TransitionTable))
    return tuple(found)


def known_tables() -> list[TransitionTable]:
    """Every table `lookup` can find: registered, then published by installed packages."""
    with _lock:
        found = dict(_registered)
    for table in _published():
        found.setdefault(table.digest, table)
    return list(found.values())


def lookup(ref: TableRef) -> TransitionTable:
    """The known table with `ref`'s digest.

    Raises:
        UnknownTableError: none is known; it names the other known versions of that name.
    """
    with _lock:
        table = _registered.get(ref.digest)
    if table is not None:
        return table
    tables = known_tables()
    for table in tables:
        if table.digest == ref.digest:
            return table
    return_same = sorted(t.digest for t in tables if t.name == ref.name)
    raise UnknownTableError(ref, return_same)
