"""Opening the store a command names, and turning its driver's failures into one line.

The store is a SQLite file path or a `postgresql://` URL, from `--store` or the environment
variable `AGENTFSM_STORE`. The stores raise `StoreError` for what they understand; what
they pass through from the driver (a refused connection, a dropped one) is reported here
as one line, exit 2, rather than psycopg's or sqlite3's traceback.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, UsageError, load_tables, registered_table, table_among
from agentfsm.errors import RunNotFoundError, StoreError
from agentfsm.events.models import TableRef
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.registry import known_tables
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores import _load
from agentfsm.stores.anchor import Anchor
from agentfsm.stores.base import EventStore, StoreOptions
from agentfsm.stores.sqlite import SQLiteEventStore

__all__ = [
    "ENV",
    "PAGE",
    "add_store_argument",
    "opened_run_store",
    "opened_store",
    "run_ids",
    "run_tables",
    "store_label",
    "store_opener",
]

ENV = "AGENTFSM_STORE"
#: Runs listed per query by a command that reads every run (`run_ids`).
PAGE = 500


def add_store_argument(p: argparse.ArgumentParser, *, table: bool = True) -> None:
    """`--store PATH|URL`, and `--table MODULE:ATTR` (once per version) for commands that
    read or steer a run."""
    p.add_argument(
        "--store", type=_args.text, metavar="PATH|URL",
        help=f"a SQLite file or postgresql:// URL (or ${ENV})",
    )  # fmt: skip
    if table:
        p.add_argument(
            "--table", metavar="MODULE:ATTR", action="append",
            help="the table the run is under, or a list of versions (repeatable: once per "
            "version; the run is opened with the one its run.started, or its latest "
            "run.migrated, names; default: found among the registered tables)",
        )  # fmt: skip


@contextmanager
def opened_run_store(
    spec: str | None,
    command: str,
    run_id: str,
    table_specs: Sequence[str] | None,
    tables: Sequence[TransitionTable] = (),
) -> Iterator[EventStore]:
    """The store, opened with the table run `run_id` is under.

    That is the table its `run.started` names (or its latest `run.migrated` moved it to):
    among the versions `--table` gives (`table_specs`) when given, else among the known
    tables (`agentfsm.fsm.registry`); the first given, or the default table, when it names
    none. Every version given is known to the store's reducer, so the part of a migrated
    run before its migration is folded with the version it was written under.

    Args:
        tables: other versions the store's reducer is to know (`Reducer(tables=...)`).

    Raises:
        UsageError: as `opened_store`, or the run's table (or the one it started under) is
            not known (exit 2).
    """
    given = load_tables(table_specs, command)
    table: TransitionTable | None = None
    with opened_store(spec, command, given[0] if given else None, given) as store:
        if given:
            started, current = run_tables(store, run_id)
            where = f"run '{run_id}'"
            table = table_among(current, given, command, where)
            if started is not None and started.digest != table.digest:
                table_among(started, given, command, where, "was started under", known=True)
        else:
            table = _table_of(store, run_id, command)
    with opened_store(spec, command, table, [*given, *tables]) as store:
        yield store


def _table_of(store: EventStore, run_id: str, command: str) -> TransitionTable | None:
    """The known table run `run_id` is under (the one its `run.started` names, or its
    latest `run.migrated` moved it to), when it is not the store's."""
    _, ref = run_tables(store, run_id)
    if ref is None or ref.digest == store.reducer.table.digest:
        return None
    return registered_table(ref, command, f"run '{run_id}'")


def run_tables(store: EventStore, run_id: str) -> tuple[TableRef | None, TableRef | None]:
    """The table run `run_id` was started under, and the one it is under now: the same
    unless a `run.migrated` moved it (None for a run that names none, or is not stored).

    The log is read through `store`, each stretch with its own table's event types when the
    store's reducer can find that table (the registry); the reading stops at an event no
    known table reads, and the table named last is the answer, for the caller to look up.
    """
    try:
        events = store.events(run_id)
    except RunNotFoundError:
        return None, None  # the command reports it in its own words
    return _load.run_tables(events)


def run_ids(store: EventStore, run_id: str | None = None) -> Iterator[str]:
    """`run_id` alone, or every run of the store in id order, a page of `PAGE` at a time
    (so a store of 100,000 runs is never listed at once)."""
    if run_id is not None:
        yield run_id
        return
    after: str | None = None
    while page := store.runs(limit=PAGE, after=after):
        for info in page:
            yield info.run_id
        after = page[-1].run_id


@contextmanager
def opened_store(
    spec: str | None,
    command: str,
    table: TransitionTable | None = None,
    tables: Sequence[TransitionTable] = (),
    *,
    anchor: Anchor | None = None,
) -> Iterator[EventStore]:
    """The store named by `spec` (or `$AGENTFSM_STORE`), closed after the block; its runs
    folded with `table` (the default table unless given), knowing the versions `tables` too,
    and its runs' heads anchored in `anchor` (else in `$AGENTFSM_ANCHOR`'s file, if set).

    Raises:
        UsageError: no store named, no SQLite file there, the PostgreSQL driver missing,
            or the driver failed (exit 2).
    """
    spec = spec or os.environ.get(ENV)
    if not spec:
        raise UsageError(f"{PROG} {command}: give --store PATH|URL or set {ENV}")
    if "\0" in spec:  # the environment variable skipped the argument's check
        raise UsageError(f"{PROG} {command}: {ENV} must not contain NUL")
    postgres = spec.startswith(("postgresql://", "postgres://"))
    driver = _postgres_driver(command) if postgres else sqlite3.Error
    given: dict[str, Any] = {} if anchor is None else {"anchor": anchor}
    if table is not None or tables:
        given["reducer"] = Reducer(table or DEFAULT_TABLE, tables=tables)
    try:  # here, not in the store: a key from the environment that is too short
        options = StoreOptions(**given)
    except ValueError as exc:
        raise UsageError(f"{PROG} {command}: {exc}") from None
    try:
        with _postgres(spec, options) if postgres else _sqlite(spec, command, options) as store:
            yield store
    except driver as exc:
        # Driver messages wrap lines for a terminal ("...refused\n\tIs the server running"):
        # one line is what a failing command prints.
        message = " ".join(str(exc).split())
        raise UsageError(f"{PROG} {command}: error: the store failed: {message}") from None


def _postgres_driver(command: str) -> type[Exception]:
    try:
        import psycopg
    except ImportError:
        raise UsageError(
            f"{PROG} {command}: a PostgreSQL store needs `pip install 'agentfsm[postgres]'`"
        ) from None
    return psycopg.Error


def _postgres(spec: str, options: StoreOptions) -> EventStore:
    from agentfsm.stores.postgres import PostgresEventStore

    store = PostgresEventStore(spec, options=options)
    try:
        _wake_engine(store)
    except BaseException:
        store.close()
        raise
    return store


def _wake_engine(store: Any) -> None:
    """Give the store the hook of the engine its database records (`meta` key `engine`), so
    a steering command queues the wake-up its append causes, in the same transaction."""
    try:
        engine = store.meta("engine")
    except StoreError:
        return  # no tables yet: the command reports what it finds
    if engine is None:
        return
    kind, _, queue = engine.partition(":")
    if kind != "procrastinate":
        raise UsageError(f"{PROG}: the store's runs are driven by an unknown engine '{engine}'")
    try:
        from agentfsm.runtime.procrastinate import Waker
    except ImportError:
        raise UsageError(
            f"{PROG}: the store's runs are driven by Procrastinate, so steering them needs "
            "`pip install 'agentfsm[procrastinate]'`"
        ) from None
    Waker(queue).install(store)


def _sqlite(spec: str, command: str, options: StoreOptions) -> SQLiteEventStore:
    return SQLiteEventStore(_sqlite_path(spec, command), options=options)


def _sqlite_path(spec: str, command: str) -> Path:
    path = Path(spec.removeprefix("sqlite:///").removeprefix("sqlite:"))
    if not path.is_file():
        # Opening would create an empty database: a typo must not look like "no such run".
        raise UsageError(f"{PROG} {command}: no SQLite store at '{path}'")
    return path


def store_opener(spec: str | None, command: str) -> Callable[[TransitionTable], EventStore]:
    """Opens handles on the store `spec` names (or `$AGENTFSM_STORE`), each folding runs
    with a given table and knowing every registered one (for runs migrated between them):
    what a long-lived reader of runs under several tables (`agentfsm ui`) needs.

    Checked now: a store that is not there, or a driver that is missing, is a usage error
    before anything is served.
    """
    spec = spec or os.environ.get(ENV)
    if not spec:
        raise UsageError(f"{PROG} {command}: give --store PATH|URL or set {ENV}")
    if "\0" in spec:
        raise UsageError(f"{PROG} {command}: {ENV} must not contain NUL")
    postgres = spec.startswith(("postgresql://", "postgres://"))
    if postgres:
        _postgres_driver(command)
    else:
        _sqlite_path(spec, command)

    def opener(table: TransitionTable) -> EventStore:
        # cache_size=0: the UI's `Source` keeps the records it read, bounded by bytes; a
        # handle's own head cache would keep up to 1,024 more per handle, of any size.
        options = StoreOptions(reducer=Reducer(table, tables=known_tables()), cache_size=0)
        if postgres:
            return _postgres(spec, options)
        return SQLiteEventStore(_sqlite_path(spec, command), options=options)

    return opener


def store_label(spec: str | None) -> str:
    """The store as a page may name it: a path, or a URL without its password."""
    spec = spec or os.environ.get(ENV) or ""
    parts = urlsplit(spec)
    if parts.scheme.startswith("postgres") and parts.password is not None:
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        user = f"{parts.username}:***@" if parts.username else ""
        return urlunsplit((parts.scheme, f"{user}{host}{port}", parts.path, "", ""))
    if parts.scheme.startswith("postgres"):
        return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
    return spec
