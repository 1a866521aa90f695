"""`agentfsm migrate`: move a run in flight to a new version of its table (`run.migrated`).

The run is opened with the table it is under now (`--table`, else the one its log names,
found in the registry), and the new version is checked against it for that run as
`check-table NEW --against OLD` would: a run whose state the new version removes, or gives
another kind, is refused with the reasons (exit 1) and nothing is written. Otherwise the
migration is appended with who made it and why, and the command prints the run, both
versions, and how the run's moves change (what the migration is for).

While a driver holds the run (a Runner in a tool, a worker) it is refused, exit 1, naming the
driver, unless `--wait S` gives it S seconds to let go: the driver would find the run's table
changed under a call in flight.
"""

from __future__ import annotations

import argparse
import sys

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, load_tables
from agentfsm.cli._output import shown
from agentfsm.cli._store import opened_run_store
from agentfsm.cli.control import command, run_argument, wait_argument
from agentfsm.errors import LifecycleError, RunHeldError, RunNotFoundError
from agentfsm.fsm.diff import diff_tables
from agentfsm.fsm.table import TransitionTable
from agentfsm.runtime import control

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm migrate`."""
    p = command(
        subparsers, "migrate", "move a run in flight to a new version of its table",
        "agentfsm migrate t-3 --to myapp.lifecycle:TABLE_V2 --by ann "
        '--reason "v2 lets a person pause a ticket" --store runs.db',
    )  # fmt: skip
    run_argument(p)
    p.add_argument(
        "--to", required=True, metavar="MODULE:ATTR",
        help="the new version: the run is checked against it from now on",
    )  # fmt: skip
    p.add_argument(
        "--by", required=True, type=_args.identity, metavar="NAME", help="who moves the run"
    )
    p.add_argument("--reason", required=True, type=_args.reason, metavar="TEXT", help="why")
    wait_argument(p)
    p.set_defaults(handler=_migrate)


def _migrate(args: argparse.Namespace) -> int:
    versions = load_tables([args.to], "migrate")
    if len(versions) != 1:
        raise UsageError(
            f"{PROG} migrate: --to names {len(versions)} tables; give the one to move to"
        )
    (new,) = versions
    with opened_run_store(args.store, "migrate", args.run_id, args.table, [new]) as store:
        old = store.reducer.table
        try:
            record = control.migrate(
                store, args.run_id, to=new, by=args.by, reason=args.reason, wait=args.wait
            )
        except RunNotFoundError as exc:
            raise UsageError(f"{PROG} migrate: {exc}") from None
        except (LifecycleError, RunHeldError) as exc:
            print(f"{PROG} migrate: refused: {shown(str(exc))}", file=sys.stderr)
            return 1
    print(
        f"run {shown(record.run_id)}: {shown(record.status)} (version {record.version}), "
        f"migrated from {_named(old)} to {_named(new)} by {shown(args.by)}"
    )
    for reason in diff_tables(old, new).affects(record.status):
        print(f"  {shown(reason)}")
    return 0


def _named(table: TransitionTable) -> str:
    return shown(f"'{table.name}' ({table.digest})")
