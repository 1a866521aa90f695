"""What every subcommand shares: usage errors, the parser class, loading tables."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from agentfsm.events.models import TableRef
from agentfsm.fsm.registry import UnknownTableError, lookup
from agentfsm.fsm.table import TransitionTable

__all__ = [
    "PROG",
    "Handler",
    "Parser",
    "UsageError",
    "load_table",
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


def load_table(spec: str, command: str) -> TransitionTable:
    """The `TransitionTable` named by `MODULE:ATTR`, or a `UsageError` saying what is wrong."""
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
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is reported alike
        raise UsageError(
            f"{PROG} {command}: cannot import '{module_name}': {type(exc).__name__}: {exc}"
        ) from None
    try:
        table = getattr(module, attr)
    except AttributeError:
        raise UsageError(
            f"{PROG} {command}: module '{module_name}' has no attribute '{attr}'"
        ) from None
    if not isinstance(table, TransitionTable):
        raise UsageError(
            f"{PROG} {command}: '{spec}' is a {type(table).__name__}, not a TransitionTable"
        )
    return table


def registered_table(ref: TableRef, command: str, where: str) -> TransitionTable:
    """The known table `ref` names (`agentfsm.fsm.registry`), or a `UsageError` (exit 2)
    that says `where` the run naming it was found and how to make the table known."""
    try:
        return lookup(ref)
    except UnknownTableError as exc:
        raise UsageError(f"{PROG} {command}: {where}: {exc}") from None
