"""`agentfsm approve|reject|cancel|pause|resume|runs|export`: steer and read runs in a store.

The store is a SQLite file path or a `postgresql://` URL, from `--store` or the environment
variable `AGENTFSM_STORE`. Each steering command appends one event and prints the run's
status after it; the process driving the run notices at its next step.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

from agentfsm.adapters.stores.base import EventStore
from agentfsm.adapters.stores.sqlite import SQLiteEventStore
from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError
from agentfsm.events.codec import dump_event
from agentfsm.fsm.errors import LifecycleError, RunNotFoundError
from agentfsm.reducers.record import RunRecord
from agentfsm.runtime import control

__all__ = ["add_parsers", "open_store"]

_ENV = "AGENTFSM_STORE"


def open_store(spec: str | None, command: str) -> EventStore:
    """The store named by `spec` (or `$AGENTFSM_STORE`): a SQLite path or a PostgreSQL URL."""
    spec = spec or os.environ.get(_ENV)
    if not spec:
        raise UsageError(f"{PROG} {command}: give --store PATH|URL or set {_ENV}")
    if spec.startswith(("postgresql://", "postgres://")):
        try:
            from agentfsm.adapters.stores.postgres import PostgresEventStore
        except ImportError:
            raise UsageError(
                f"{PROG} {command}: a PostgreSQL store needs `pip install 'agentfsm[postgres]'`"
            ) from None
        return PostgresEventStore(spec)
    path = Path(spec.removeprefix("sqlite:///").removeprefix("sqlite:"))
    if not path.is_file():
        # Opening would create an empty database: a typo must not look like "no such run".
        raise UsageError(f"{PROG} {command}: no SQLite store at '{path}'")
    return SQLiteEventStore(path)


def _store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store", type=_args.text, metavar="PATH|URL",
        help=f"a SQLite file or postgresql:// URL (or ${_ENV})",
    )  # fmt: skip


def _steer(
    name: str, act: Callable[[EventStore, argparse.Namespace], RunRecord]
) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        with open_store(args.store, name) as store:
            try:
                record = act(store, args)
            except RunNotFoundError as exc:
                raise UsageError(f"{PROG} {name}: {exc}") from None
            except LifecycleError as exc:
                print(f"{PROG} {name}: refused: {exc}", file=sys.stderr)
                for note in getattr(exc, "__notes__", ()):  # e.g. where the call waits
                    print(f"  {note}", file=sys.stderr)
                return 1
        pending = (
            f", waiting for approval: {', '.join(record.pending_approvals)}"
            if record.pending_approvals
            else ""
        )
        print(f"run {record.run_id}: {record.status} (version {record.version}){pending}")
        return 0

    return handler


def _command(
    subparsers: argparse._SubParsersAction[Parser], name: str, summary: str, example: str
) -> argparse.ArgumentParser:
    return subparsers.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def _approve(store: EventStore, a: argparse.Namespace) -> RunRecord:
    return control.approve(store, a.run_id, a.action_id, a.approver)


def _reject(store: EventStore, a: argparse.Namespace) -> RunRecord:
    return control.reject(store, a.run_id, a.action_id, a.approver, a.reason)


def _cancel(store: EventStore, a: argparse.Namespace) -> RunRecord:
    return control.cancel(store, a.run_id, reason=a.reason, requested_by=a.requested_by)


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register the store commands."""
    p = _command(
        subparsers, "approve", "approve the exact call an action waits with (approval.accepted)",
        "agentfsm approve run_123 call_cancel_123 --approver alice --store runs.db",
    )  # fmt: skip
    _run_action(p)
    p.add_argument("--approver", type=_args.identity, help="who approved")
    p.set_defaults(handler=_steer("approve", _approve))

    p = _command(
        subparsers, "reject", "refuse a call waiting for approval; the model sees the reason",
        'agentfsm reject run_123 call_cancel_123 --reason "not your order" --store runs.db',
    )  # fmt: skip
    _run_action(p)
    p.add_argument("--approver", type=_args.identity, help="who refused")
    p.add_argument("--reason", type=_args.text, help="why (shown to the model)")
    p.set_defaults(handler=_steer("reject", _reject))

    p = _command(
        subparsers, "cancel", "ask a run to stop; calls in flight settle, then it is cancelled",
        'agentfsm cancel run_123 --reason "customer hung up" --store runs.db',
    )  # fmt: skip
    _run(p)
    p.add_argument("--reason", type=_args.text, help="why")
    p.add_argument("--requested-by", type=_args.identity, help="who asked")
    p.set_defaults(handler=_steer("cancel", _cancel))

    p = _command(
        subparsers, "pause", "pause a run between steps (waiting for input or a callback)",
        'agentfsm pause run_123 --reason "waiting for the customer" --store runs.db',
    )  # fmt: skip
    _run(p)
    p.add_argument("--reason", type=_args.text, required=True, help="what the run waits for")
    p.set_defaults(handler=_steer("pause", lambda s, a: control.pause(s, a.run_id, a.reason)))

    p = _command(
        subparsers, "resume", "un-pause a run; a worker or Runner.resume then drives it",
        "agentfsm resume run_123 --store runs.db",
    )  # fmt: skip
    _run(p)
    p.set_defaults(handler=_steer("resume", lambda s, a: control.resume(s, a.run_id)))

    p = _command(
        subparsers, "runs", "list the runs in a store with their status (no replay)",
        "agentfsm runs --store runs.db --status waiting_approval",
    )  # fmt: skip
    _store_argument(p)
    p.add_argument(
        "--status", type=_args.identity, action="append",
        help="only runs in this status (repeatable)",
    )  # fmt: skip
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=_runs)

    p = _command(
        subparsers, "export", "write a store's events as JSON Lines, for validate/replay/diagram",
        "agentfsm export --store runs.db > runs.jsonl && agentfsm validate runs.jsonl",
    )  # fmt: skip
    _store_argument(p)
    p.add_argument("--run-id", type=_args.run_id, help="only this run")
    p.set_defaults(handler=_export)


def _run(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", type=_args.run_id, metavar="RUN_ID")
    _store_argument(p)


def _run_action(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_id", type=_args.run_id, metavar="RUN_ID")
    p.add_argument("action_id", type=_args.run_id, metavar="ACTION_ID")
    _store_argument(p)


def _runs(args: argparse.Namespace) -> int:
    with open_store(args.store, "runs") as store:
        infos = store.runs(status=args.status)
    if args.format == "json":
        rows = [
            {
                "run_id": i.run_id,
                "status": i.status,
                "version": i.version,
                "updated_at": i.updated_at,
            }
            for i in infos
        ]
        print(json.dumps(rows, sort_keys=True))
    else:
        width = max((len(i.run_id) for i in infos), default=0)
        for i in infos:
            print(f"{i.run_id:<{width}}  {i.status:<16}  version {i.version:<5}  {i.updated_at}")
    return 0


def _export(args: argparse.Namespace) -> int:
    with open_store(args.store, "export") as store:
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
