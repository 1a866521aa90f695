"""`agentfsm fork`: a new run from another run's first events, to drive it on another way.

The new run holds the source's events up to `--at`, re-addressed to it, and a `run.forked`
saying where they came from; the source is only read. Append what should happen differently
(`agentfsm append`, `approve`, `reject`, `migrate` to another version) and drive the fork
like any run; `agentfsm diff SOURCE FORK` shows where the two part.

A sequence where the run has ended, or where a call is in flight (started, no outcome), is
refused with the reason, exit 1; an `--at` past the run's end, or a `--as` that exists, is a
usage error, exit 2. Nothing is written in either case.
"""

from __future__ import annotations

import argparse
import sys

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError
from agentfsm.cli._output import shown
from agentfsm.cli._store import opened_run_store
from agentfsm.cli.control import command, run_argument
from agentfsm.errors import ConcurrencyConflictError, ForkError, RunNotFoundError
from agentfsm.runtime import control

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm fork`."""
    p = command(
        subparsers, "fork", "start a new run from another run's first events",
        'agentfsm fork r-7 --at 12 --as r-7b --by ann --reason "try rejecting the refund" '
        "--store runs.db",
    )  # fmt: skip
    run_argument(p)
    p.add_argument(
        "--at", required=True, type=_sequence, metavar="SEQ",
        help="the last of the source's events the fork holds",
    )  # fmt: skip
    p.add_argument(
        "--as", required=True, dest="as_run", type=_args.run_id, metavar="NEW_RUN",
        help="the new run's id",
    )  # fmt: skip
    p.add_argument("--by", type=_args.identity, metavar="NAME", help="who forks the run")
    p.add_argument("--reason", type=_args.reason, metavar="TEXT", help="why")
    p.set_defaults(handler=_fork)


def _sequence(value: str) -> int:
    try:
        found = int(value)
    except ValueError:
        found = 0
    if found < 1:
        raise argparse.ArgumentTypeError(
            f"a sequence is a whole number from 1, got '{shown(value)}'"
        )
    return found


def _fork(args: argparse.Namespace) -> int:
    with opened_run_store(args.store, "fork", args.run_id, args.table) as store:
        try:
            record = control.fork(
                store, args.run_id, at=args.at, as_run=args.as_run, by=args.by, reason=args.reason
            )
        except (RunNotFoundError, ValueError) as exc:
            raise UsageError(f"{PROG} fork: {shown(str(exc))}") from None
        except ConcurrencyConflictError:
            raise UsageError(
                f"{PROG} fork: run {shown(args.as_run)} was made meanwhile: a fork is a new run"
            ) from None
        except ForkError as exc:
            print(f"{PROG} fork: refused: {shown(str(exc))}", file=sys.stderr)
            return 1
    print(
        f"run {shown(record.run_id)}: {record.status} (version {record.version}), forked from "
        f"{shown(args.run_id)} at sequence {args.at}"
    )
    return 0
