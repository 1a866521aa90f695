"""What every subcommand shares: usage errors, the parser class, loading tables."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NoReturn

from agentfsm.errors import InvalidTableError, UnknownTableError
from agentfsm.events.models import TableRef
from agentfsm.fsm.registry import lookup
from agentfsm.fsm.table import TransitionTable

__all__ = [
    "MAX_TABLES",
    "PROG",
    "Handler",
    "Parser",
    "UsageError",
    "import_tables",
    "load_table",
    "load_tables",
    "only_table",
    "table_among",
]

PROG = "agentfsm"


class UsageError(Exception):
    """The command line cannot be carried out; the message is printed as one line (exit 2).

    Attributes:
        prog: the (sub)command whose `--help` explains the usage.
    """

    def __init__(self, message: str, prog: str = PROG) -> None:
        self.prog = prog
        super().__init__(message)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", self.prog)


Handler = Callable[[argparse.Namespace], int]


#: How many tables one `--table MODULE:ATTR` may name (a user's iterable could be endless).
MAX_TABLES = 256


def import_tables(spec: str, command: str) -> tuple[TransitionTable, ...]:
    """The tables `MODULE:ATTR` names: a `TransitionTable`, an iterable of them (every version
    still in use, as the `agentfsm.tables` entry points publish them), or a function that
    builds either. The one loader of every `--table`.

    Raises:
        InvalidTableError: importing the module, or calling the function, raised it: a table
            that cannot be built (`check-table` reports its problems; `load_tables` makes it
            a usage error).
        UsageError: anything else: the spec, the import, the attribute, what it holds.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{PROG} {command}: --table wants MODULE:ATTR, got '{spec}'")
    # Like other tools that import the user's code (uvicorn, gunicorn): the current
    # directory is importable, as it is under `python -m`.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except InvalidTableError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is reported alike
        raise UsageError(
            f"{PROG} {command}: cannot import '{module_name}': {type(exc).__name__}: {exc}"
        ) from None
    try:
        value = getattr(module, attr)
    except AttributeError:
        raise UsageError(
            f"{PROG} {command}: module '{module_name}' has no attribute '{attr}'"
        ) from None
    if not isinstance(value, TransitionTable) and callable(value):
        try:
            value = value()
        except InvalidTableError:
            raise
        except Exception as exc:  # noqa: BLE001 - the user's factory failing, reported alike
            raise UsageError(
                f"{PROG} {command}: building '{spec}' raised {type(exc).__name__}: {exc}"
            ) from None
    return _tables_in(value, spec, command)


def _tables_in(value: object, spec: str, command: str) -> tuple[TransitionTable, ...]:
    if isinstance(value, TransitionTable):
        return (value,)
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise UsageError(
            f"{PROG} {command}: '{spec}' is a {type(value).__name__}, not a TransitionTable "
            "or an iterable of them"
        )
    found: list[TransitionTable] = []
    for i, item in enumerate(value):
        if not isinstance(item, TransitionTable):
            raise UsageError(
                f"{PROG} {command}: item {i} of '{spec}' is a {type(item).__name__}, not a "
                "TransitionTable"
            )
        if len(found) == MAX_TABLES:
            raise UsageError(f"{PROG} {command}: '{spec}' names more than {MAX_TABLES} tables")
        found.append(item)
    if not found:
        raise UsageError(f"{PROG} {command}: '{spec}' names no table")
    return tuple(found)


def load_tables(specs: Sequence[str] | None, command: str) -> tuple[TransitionTable, ...]:
    """The tables every `--table` names, in order, each version once (by digest).

    Raises:
        UsageError: as `import_tables`, or a table there cannot be built (exit 2).
    """
    found: dict[str, TransitionTable] = {}
    for spec in specs or ():
        try:
            tables = import_tables(spec, command)
        except InvalidTableError as exc:
            problems = "; ".join(exc.problems)
            raise UsageError(f"{PROG} {command}: '{spec}' cannot be built: {problems}") from None
        for table in tables:
            found.setdefault(table.digest, table)
    return tuple(found.values())


def load_table(specs: Sequence[str] | str | None, command: str) -> TransitionTable | None:
    """The one table `--table` names (None when not given), for a command that shows or
    checks one table, not runs that may be under several versions.

    Raises:
        UsageError: as `load_tables`, or it names more than one table.
    """
    return only_table(load_tables([specs] if isinstance(specs, str) else specs, command), command)


def only_table(
    tables: Sequence[TransitionTable],
    command: str,
    *,
    given: str = "--table",
    hint: str = "this command takes one",
) -> TransitionTable | None:
    """The one of `tables` (None for none), or a `UsageError` naming them all.

    Args:
        tables: the tables the command line named.
        command: for the message.
        given: what named them, for the message (`--table`, or the `MODULE:ATTR` given).
        hint: what to do instead, for the message.
    """
    if len(tables) > 1:
        named = ", ".join(f"'{t.name}' ({t.digest})" for t in tables)
        raise UsageError(f"{PROG} {command}: {given} names {len(tables)} tables ({named}); {hint}")
    return tables[0] if tables else None


def table_among(
    ref: TableRef | None,
    given: Sequence[TransitionTable],
    command: str,
    where: str,
    how: str = "is under",
    *,
    known: bool = False,
) -> TransitionTable:
    """The table a run's log names (`ref`) among those `--table` gave (or, with `known`,
    among the registered ones too); the first given when the log names none.

    Args:
        ref: the table the log names.
        given: the tables `--table` gave (at least one).
        command: for the message.
        where: the run, for the message (`run 't-1'`).
        how: how the run relates to `ref`, for the message (`is under`, `was started under`).
        known: a registered table will do (a version the fold needs, not the one the
            command was asked to use).

    Raises:
        UsageError: `ref`'s table is not there: the message names it and what was given.
    """
    if ref is None:
        return given[0]
    for table in given:
        if table.digest == ref.digest:
            return table
    if known:
        try:
            return lookup(ref)
        except UnknownTableError:
            pass
    named = ", ".join(f"'{t.name}' ({t.digest})" for t in given)
    nor = " nor registered" if known else ""
    raise UsageError(
        f"{PROG} {command}: {where} {how} table '{ref.name}' ({ref.digest}), which is not "
        f"among the --table given ({named}){nor}: give that version too (--table once per "
        "version, or MODULE:ATTR of a list of them)"
    )


def registered_table(ref: TableRef, command: str, where: str) -> TransitionTable:
    """The known table `ref` names (`agentfsm.fsm.registry`), or a `UsageError` (exit 2)
    that says `where` the run naming it was found and how to make the table known."""
    try:
        return lookup(ref)
    except UnknownTableError as exc:
        raise UsageError(f"{PROG} {command}: {where}: {exc}") from None
