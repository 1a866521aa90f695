"""`agentfsm check-table`: check a table (or a table spec) and print the report; with
`--against OLD`, what changed from an older version, and with `--store`, which runs in flight
the change touches (and which were migrated to the new version already).

Exit status with `--against`: without `--store`, 1 when the new version takes anything away
(a move removed or changed, a state removed or of another kind, an event type removed or
with other fields), 0 when it only adds; with `--store`, 1 when a run in flight under OLD
stands where the change takes away what it relies on (affected), else 0: the store answers
whether deploying the new version breaks a run, which is the question there. A run that
only gains moves is listed as extended, and does not make it 1.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, import_tables, only_table
from agentfsm.cli._output import print_json, shown, why
from agentfsm.cli._store import opened_store, run_tables
from agentfsm.errors import InvalidTableError
from agentfsm.events.models import TableRef
from agentfsm.fsm.check import (
    TableReport,
    check_parts,
    check_table,
    table_from_spec,
    transition_matrix,
)
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.diff import TableDiff, diff_tables
from agentfsm.fsm.table import TransitionTable
from agentfsm.stores.base import EventStore

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
            "  agentfsm check-table --spec lifecycle.json --format json\n"
            "  agentfsm check-table myapp.lifecycle:TABLE_V2 --against myapp.lifecycle:TABLE\n"
            "  agentfsm check-table v2.json --against v1.json --store runs.db\n\n"
            "with --against: exit 1 when the new version removes or changes a move, a state,\n"
            "or an event type (0 when it only adds); with --store, exit 1 when a run in\n"
            "flight under OLD stands where the change takes away a move it relies on (0 when\n"
            "none does: a run that only gains moves is listed as extended)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "new", nargs="?", metavar="NEW",
        help="the table to check: MODULE:ATTR, or a table spec FILE.json",
    )  # fmt: skip
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--table", metavar="MODULE:ATTR",
        help="a TransitionTable, or a function that builds one (its build errors are reported)",
    )  # fmt: skip
    source.add_argument("--spec", type=_args.path, metavar="FILE.json", help="a table description")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--matrix", action="store_true", help="also print every (state, event) move")
    p.add_argument(
        "--against", metavar="OLD",
        help="list what changed from this older version (MODULE:ATTR or FILE.json)",
    )  # fmt: skip
    p.add_argument(
        "--store", type=_args.text, metavar="PATH|URL",
        help="with --against: the runs in flight the change touches (SQLite file or URL)",
    )  # fmt: skip
    p.set_defaults(handler=_check)


def _check(args: argparse.Namespace) -> int:
    if args.new is not None:
        if args.table is not None or args.spec is not None:
            raise UsageError(f"{PROG} check-table: give NEW or --table/--spec, not both")
        if _is_spec(args.new):
            args.spec = Path(args.new)
        else:
            args.table = args.new
    if args.against is None:
        if args.store is not None:
            raise UsageError(f"{PROG} check-table: --store goes with --against OLD")
        return _check_one(args)
    if args.matrix:
        raise UsageError(f"{PROG} check-table: --matrix does not go with --against")
    return _compare(args)


def _is_spec(value: str) -> bool:
    """A file (`v2.json`, or any existing file) rather than `MODULE:ATTR`."""
    return value.endswith(".json") or os.path.isfile(value)


def _check_one(args: argparse.Namespace) -> int:
    table, report = _report(args)
    _print_report(args, table, report)
    return 0 if report.ok else 1


def _report(args: argparse.Namespace) -> tuple[TransitionTable | None, TableReport]:
    """The table `--spec`, `--table` or NEW names (the default one if none), and its report."""
    if args.spec is not None:
        return _from_spec(args.spec)
    if args.table is not None:
        return _load(args.table)
    return DEFAULT_TABLE, check_table(DEFAULT_TABLE)


def _from_spec(path: Path) -> tuple[TransitionTable | None, TableReport]:
    try:
        parts = table_from_spec(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        raise UsageError(f"{PROG} check-table: cannot read '{path}': {exc.strerror}") from None
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{PROG} check-table: '{path}': {why(exc)}") from None
    try:
        table = TransitionTable(*parts)
    except InvalidTableError:
        return None, check_parts(*parts)  # every problem, as data
    return table, check_table(table)


def _print_report(
    args: argparse.Namespace, table: TransitionTable | None, report: TableReport
) -> None:
    if args.spec is not None:
        # A spec's conditions are labels that always hold: its matrix would show alternatives
        # the real predicates choose between as if any could fire; it was never printed.
        table = None
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


def _compare(args: argparse.Namespace) -> int:
    new, report = _report(args)
    if new is None:  # a new version that cannot be built is reported as without --against
        _print_report(args, new, report)
        return 1
    old, old_report = (
        _from_spec(Path(args.against)) if _is_spec(args.against) else _load(args.against)
    )
    if old is None:
        raise UsageError(
            f"{PROG} check-table: --against '{args.against}' is not a valid table: "
            + "; ".join(old_report.errors)
        )
    diff = diff_tables(old, new)
    runs = None
    if args.store is not None:
        # Both versions known to the store's reducer, so each run's log reads back with
        # its own table's event types, migrations included.
        with opened_store(args.store, "check-table", tables=[old, new]) as store:
            runs = _RunsInFlight.of(store, old, diff)
    if args.format == "json":
        out = diff.to_json()
        if runs is not None:
            out["runs"] = runs.to_json()
        print_json(lambda: out, "check-table")
    else:
        print("\n".join(map(shown, _diff_lines(diff, runs))))
    if runs is not None:
        return 1 if runs.affected else 0
    return 1 if diff.takes_away else 0


def _diff_lines(diff: TableDiff, runs: _RunsInFlight | None) -> Iterator[str]:
    yield f"old: '{diff.old.name}' ({diff.old.digest})"
    yield f"new: '{diff.new.name}' ({diff.new.digest})"
    if diff.identical:
        yield "the same version: nothing changed"
    else:
        yield from (f"- {s}" for s in diff.sentences())
        yield diff.summary()
    if runs is not None:
        yield (
            f"runs in flight: {runs.checked} checked, {len(runs.affected)} affected, "
            f"{len(runs.extended)} extended, {len(runs.migrated)} migrated, "
            f"{len(runs.not_compared)} not compared"
        )
        for run_id, status, reasons in runs.affected:
            yield f"affected: run '{run_id}' in '{status}': {'; '.join(reasons)}"
        for run_id, status, reasons in runs.extended:
            yield f"extended: run '{run_id}' in '{status}': {'; '.join(reasons)}"
        for run_id, status, reason in runs.migrated:
            yield f"migrated: run '{run_id}' in '{status}': {reason}"
        for run_id, status, reason in runs.not_compared:
            yield f"not compared: run '{run_id}' in '{status}': {reason}"


#: How many runs are listed per read of the runs table (a store may hold many).
_PAGE = 500


class _RunsInFlight:
    """The runs of a store that are not done, against a change from `old`.

    A run under `old` (its `run.started` names it, or a `run.migrated` moved it there) is
    affected when the diff takes away what it relies on where it stands (`TableDiff.breaks`),
    and extended when it only gains moves there (`TableDiff.adds`). A run
    started under `old` and migrated to the new version is listed as such. A run under any
    other table keeps that table, so the change is nothing to it: it is listed as not
    compared, with the table it names.
    """

    def __init__(self) -> None:
        self.checked = 0
        self.affected: list[tuple[str, str, tuple[str, ...]]] = []
        self.extended: list[tuple[str, str, tuple[str, ...]]] = []
        self.migrated: list[tuple[str, str, str]] = []
        self.not_compared: list[tuple[str, str, str]] = []

    @classmethod
    def of(cls, store: EventStore, old: TransitionTable, diff: TableDiff) -> _RunsInFlight:
        found = cls()
        after: str | None = None
        while page := store.runs(limit=_PAGE, after=after):
            after = page[-1].run_id
            for info in page:
                # The runs table says where each run stands without folding its log; a run
                # that ended is done under any version, so its log is not read.
                if info.status in old.terminal_states:
                    continue
                found.checked += 1
                row = (info.run_id, info.status)
                started, current = run_tables(store, info.run_id)
                if current is not None and current.digest == old.digest:
                    if reasons := diff.breaks(info.status):
                        found.affected.append((*row, reasons))
                    elif gains := diff.adds(info.status):
                        found.extended.append((*row, gains))
                elif (
                    current is not None
                    and current.digest == diff.new.digest
                    and (started is not None and started.digest != current.digest)
                ):
                    whence = "the old version" if started.digest == old.digest else _named(started)
                    found.migrated.append((*row, f"started under {whence}, migrated to the new"))
                else:
                    found.not_compared.append((*row, _not_compared(started, current, diff)))
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "affected": [
                {"run_id": r, "status": s, "reasons": list(why)} for r, s, why in self.affected
            ],
            "extended": [
                {"run_id": r, "status": s, "reasons": list(why)} for r, s, why in self.extended
            ],
            "migrated": [{"run_id": r, "status": s, "reason": why} for r, s, why in self.migrated],
            "not_compared": [
                {"run_id": r, "status": s, "reason": why} for r, s, why in self.not_compared
            ],
        }


def _not_compared(started: TableRef | None, current: TableRef | None, diff: TableDiff) -> str:
    """Why a run not under the old version is not compared."""
    if current is None:
        return "its run.started names no table"
    if current.digest == diff.new.digest:
        return "started under the new version already"
    if started is not None and started.digest != current.digest:
        return f"migrated to {_named(current)}, not the old version"
    return f"started under {_named(current)}, not the old version"


def _named(ref: TableRef) -> str:
    return f"'{ref.name}' ({ref.digest})"


def _load(spec: str) -> tuple[TransitionTable | None, TableReport]:
    """The one table `MODULE:ATTR` names (or builds), and its report; a table that cannot
    be built is its builder's problems."""
    try:
        tables = import_tables(spec, "check-table")
    except InvalidTableError as exc:
        return None, _broken(exc)
    only_table(  # refuses more than one; `import_tables` names at least one
        tables, "check-table", given=f"'{spec}'",
        hint="check one version at a time (or compare two with --against)",
    )  # fmt: skip
    return tables[0], check_table(tables[0])


def _broken(exc: InvalidTableError) -> TableReport:
    return TableReport(exc.table, exc.problems, (), (), 0, 0, 0, 0, built=False)
