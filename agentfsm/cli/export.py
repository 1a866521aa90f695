"""`agentfsm export`: a store's events as JSON Lines, for validate/replay/diagram."""

from __future__ import annotations

import argparse

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError
from agentfsm.cli._store import add_store_argument, opened_store
from agentfsm.cli.control import command
from agentfsm.events.codec import dump_event
from agentfsm.fsm.errors import RunNotFoundError

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm export`."""
    p = command(
        subparsers, "export", "write a store's events as JSON Lines, for validate/replay/diagram",
        "agentfsm export --store runs.db > runs.jsonl && agentfsm validate runs.jsonl",
    )  # fmt: skip
    add_store_argument(p)
    p.add_argument("--run-id", type=_args.run_id, help="only this run")
    p.set_defaults(handler=_export)


def _export(args: argparse.Namespace) -> int:
    with opened_store(args.store, "export") as store:
        ids = [args.run_id] if args.run_id else [i.run_id for i in store.runs()]
        for run_id in ids:
            try:
                events = store.events(run_id)
            except RunNotFoundError as exc:
                raise UsageError(f"{PROG} export: {exc}") from None
            try:
                for event in events:
                    print(dump_event(event))
            finally:
                # Closed now, not when garbage-collected: a reader gone mid-run must not leave
                # the store's cursor to be closed after the store ("Exception ignored").
                getattr(events, "close", lambda: None)()
    return 0
