"""`agentfsm check-table`: check a table (or a table spec) and print the report."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError
from agentfsm.cli._output import print_json, shown, why
from agentfsm.errors import InvalidTableError
from agentfsm.fsm.check import (
    TableReport,
    check_parts,
    check_table,
    table_from_spec,
    transition_matrix,
)
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm check-table`."""
    p = subparsers.add_parser(
        "check-table",
        help="check a transition table: errors, warnings, the move matrix",
        description=(
            "Verify a table: reachability, a way to end from every state, terminal states "
            "absorbing, no nondeterminism, events that can never fire. Exit 1 on errors."
        ),
        epilog=(
            "examples:\n  agentfsm check-table\n"
            "  agentfsm check-table --table myapp.lifecycle:TABLE\n"
            "  agentfsm check-table --spec lifecycle.json --format json"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--table", metavar="MODULE:ATTR",
        help="a TransitionTable, or a function that builds one (its build errors are reported)",
    )  # fmt: skip
    source.add_argument("--spec", type=_args.path, metavar="FILE.json", help="a table description")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--matrix", action="store_true", help="also print every (state, event) move")
    p.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    table: TransitionTable | None = None
    if args.spec is not None:
        try:
            spec = json.loads(args.spec.read_text(encoding="utf-8"))
            report = check_parts(*table_from_spec(spec))
        except OSError as exc:
            raise UsageError(
                f"{PROG} check-table: cannot read '{args.spec}': {exc.strerror}"
            ) from None
        except (ValueError, RecursionError) as exc:
            raise UsageError(f"{PROG} check-table: '{args.spec}': {why(exc)}") from None
    elif args.table is not None:
        table, report = _load(args.table)
    else:
        table, report = DEFAULT_TABLE, check_table(DEFAULT_TABLE)
    if args.format == "json":
        out = report.to_json()
        if args.matrix and table is not None:
            out["matrix"] = [
                {"state": s, "event": e, "moves": [{"condition": c, "target": t} for c, t in cell]}
                for (s, e), cell in transition_matrix(table).items()
            ]
        print_json(lambda: out, "check-table")
    else:
        # A spec file's names are printed like a log's: escaped, one line each.
        print("\n".join(map(shown, report.render().splitlines())))
        if args.matrix and table is not None:
            for (state, event), cell in transition_matrix(table).items():
                moves = ", ".join(f"{t} [{c}]" if c else t for c, t in cell) or "-"
                print(shown(f"  {state:<18} {event:<22} {moves}"))
    return 0 if report.ok else 1


def _load(spec: str) -> tuple[TransitionTable | None, TableReport]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{PROG} check-table: --table wants MODULE:ATTR, got '{spec}'")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        value = getattr(importlib.import_module(module_name), attr)
    except InvalidTableError as exc:
        return None, _broken(exc)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is reported alike
        raise UsageError(
            f"{PROG} check-table: cannot load '{spec}': {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(value, TransitionTable) and callable(value):
        try:
            value = value()
        except InvalidTableError as exc:
            return None, _broken(exc)
        except Exception as exc:  # noqa: BLE001 - the user's factory failing, reported alike
            raise UsageError(
                f"{PROG} check-table: building '{spec}' raised {type(exc).__name__}: {exc}"
            ) from None
    if not isinstance(value, TransitionTable):
        raise UsageError(
            f"{PROG} check-table: '{spec}' is a {type(value).__name__}, not a TransitionTable"
        )
    return value, check_table(value)


def _broken(exc: InvalidTableError) -> TableReport:
    return TableReport(exc.table, exc.problems, (), (), 0, 0, 0, 0, built=False)
