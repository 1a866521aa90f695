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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, UsageError
from agentfsm.stores.base import EventStore
from agentfsm.stores.sqlite import SQLiteEventStore

__all__ = ["ENV", "add_store_argument", "opened_store"]

ENV = "AGENTFSM_STORE"


def add_store_argument(p: argparse.ArgumentParser) -> None:
    """`--store PATH|URL`."""
    p.add_argument(
        "--store", type=_args.text, metavar="PATH|URL",
        help=f"a SQLite file or postgresql:// URL (or ${ENV})",
    )  # fmt: skip


@contextmanager
def opened_store(spec: str | None, command: str) -> Iterator[EventStore]:
    """The store named by `spec` (or `$AGENTFSM_STORE`), closed after the block.

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
    try:
        with _postgres(spec) if postgres else _sqlite(spec, command) as store:
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


def _postgres(spec: str) -> EventStore:
    from agentfsm.stores.postgres import PostgresEventStore

    return PostgresEventStore(spec)


def _sqlite(spec: str, command: str) -> SQLiteEventStore:
    path = Path(spec.removeprefix("sqlite:///").removeprefix("sqlite:"))
    if not path.is_file():
        # Opening would create an empty database: a typo must not look like "no such run".
        raise UsageError(f"{PROG} {command}: no SQLite store at '{path}'")
    return SQLiteEventStore(path)
