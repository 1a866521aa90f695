"""`agentfsm export`: a store's events as JSON Lines, complete or known not to be.

Runs are read one after another, so a run that stops reading back (a damaged row, or in a
keyed store a row whose link does not match: every link is checked, as a load checks it) is
found after earlier runs were written. With `-o FILE` nothing is lost: the events go to a
temporary file renamed over FILE only on success, so FILE is either the whole export or
what it was before. On standard output what was printed cannot be taken back; stderr says
the output is incomplete. Exit 1 for a stored event that does not check out (naming its run
and sequence), 2 for any other failure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, load_tables
from agentfsm.cli._files import replacing
from agentfsm.cli._output import error_text
from agentfsm.cli._store import add_store_argument, opened_store, run_ids
from agentfsm.cli.control import command
from agentfsm.errors import AgentFSMError, CorruptLogError, RunNotFoundError
from agentfsm.events.codec import dump_event
from agentfsm.stores._load import close_iterator
from agentfsm.stores.base import EventStore

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm export`."""
    p = command(
        subparsers, "export", "write a store's events as JSON Lines, for validate/replay/diagram",
        "agentfsm export --store runs.db -o runs.jsonl && agentfsm validate runs.jsonl",
    )  # fmt: skip
    add_store_argument(p)
    p.add_argument("--run-id", type=_args.run_id, help="only this run")
    p.add_argument(
        "--output", "-o", type=_args.path, metavar="FILE",
        help="write FILE whole or not at all (default: standard output)",
    )  # fmt: skip
    p.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    output: Path | None = args.output
    # Every version given is known to the reader: a run's events are read with the types
    # of the table each stretch of its log was written under.
    given = load_tables(args.table, "export")
    with opened_store(args.store, "export", given[0] if given else None, given) as store:
        if args.run_id:
            try:
                store.run_info(args.run_id)  # before any output: a plain usage error
            except RunNotFoundError as exc:
                raise UsageError(f"{PROG} export: {exc}") from None
        ids = run_ids(store, args.run_id)
        lost = "the output is incomplete" if output is None else f"'{output}' was not written"
        try:
            if output is None:
                _write(store, ids, sys.stdout.write, lost)
            else:
                with replacing(output, "export") as handle:
                    _write(store, ids, lambda line: handle.write(line.encode("utf-8")), lost)
        except CorruptLogError as exc:  # a stored event that does not check out: exit 1
            print(f"{PROG} export: error: {error_text(exc)}; {lost}", file=sys.stderr)
            return 1
    return 0


def _write(
    store: EventStore, ids: Iterable[str], write: Callable[[str], object], lost: str
) -> None:
    try:
        for run_id in ids:
            events = store.events(run_id)
            try:
                for event in events:
                    write(dump_event(event) + "\n")
            finally:
                # Closed now, not when garbage-collected: a reader gone mid-run must not leave
                # the store's cursor to be closed after the store ("Exception ignored").
                close_iterator(events)
    except (BrokenPipeError, CorruptLogError):
        raise  # the reader left: `main` ends quietly; a bad row is the caller's exit 1
    except Exception as exc:  # noqa: BLE001 - whatever stops an export, the output is partial
        kind = "" if isinstance(exc, AgentFSMError) else f"{type(exc).__name__}: "
        raise UsageError(f"{PROG} export: error: {kind}{error_text(exc)}; {lost}") from None
