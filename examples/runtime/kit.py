"""What the runtime examples share: quiet logs, printing a run's path and record, the tools."""

from __future__ import annotations

import argparse
import json
import logging
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog

from agentfsm.runtime import RunResult, Tool, ToolContext
from agentfsm.stores import EventStore, SQLiteEventStore


def quiet_logs() -> None:
    """Show only warnings (a guard refusal, an unknown outcome) from the Runner's logs.

    An application configures structlog; the library never does.
    """
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))


def open_store(path: Path) -> SQLiteEventStore:
    """The embedded SQLite store in one file (NORMAL sync: fast, safe against a crash)."""
    return SQLiteEventStore(path, synchronous="NORMAL")


def path_of(store: EventStore, run_id: str) -> list[str]:
    """Each applied event as `seq  type  from -> to`."""
    lines = []
    record = None
    for event in store.events(run_id):
        before = record or store.reducer.initial(run_id)
        record = store.reducer.reduce(before, event)
        lines.append(f"{event.sequence:>3}  {event.type:<22} {before.status} -> {record.status}")
    return lines


def show(store: EventStore, result: RunResult, title: str) -> None:
    """Print the run's path and a summary of its final record."""
    print(f"== {title}: run '{result.run_id}'")
    for line in path_of(store, result.run_id):
        print("  " + line)
    record = result.record
    summary: dict[str, Any] = {
        "status": record.status,
        "stop_reason": record.stop_reason,
        "stop_detail": record.stop_detail,
        "turn": record.turn,
        "final_output": record.final_output,
        "usage": record.usage.to_json(),
        "actions": {
            a.action_id: {"tool": a.tool, "status": a.status, "attempts": a.attempts}
            | ({"reason": a.reason} if a.reason else {})
            for a in record.actions.values()
        },
    }
    print("  final record: " + json.dumps(summary, ensure_ascii=False))


class EffectLedger:
    """A fake backend's own durable ledger of effects, in its own SQLite file.

    It outlives the process that called the tool, so after a crash it tells what really
    happened: `effects` counts actions taken per idempotency key, `calls` counts calls. A
    tool that honours its key (`idempotent=True`) returns the first result for a repeated
    key without acting again; one that ignores keys acts every time it is called.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        with sqlite3.connect(path) as db:
            db.execute(
                "CREATE TABLE IF NOT EXISTS ledger (key TEXT PRIMARY KEY, tool TEXT NOT NULL, "
                "result TEXT NOT NULL, effects INTEGER NOT NULL, calls INTEGER NOT NULL)"
            )
        db.close()

    def act(self, ctx: ToolContext, result: Any, *, honour_key: bool) -> Any:
        """Take the effect (or, for a repeated key the tool honours, return the first result)."""
        key = ctx.idempotency_key
        with sqlite3.connect(self.path, timeout=30) as db:
            found = db.execute("SELECT result FROM ledger WHERE key = ?", (key,)).fetchone()
            if found is not None and honour_key:
                db.execute("UPDATE ledger SET calls = calls + 1 WHERE key = ?", (key,))
                result = json.loads(found[0])
            elif found is not None:
                db.execute(
                    "UPDATE ledger SET calls = calls + 1, effects = effects + 1 WHERE key = ?",
                    (key,),
                )
            else:
                db.execute(
                    "INSERT INTO ledger VALUES (?, ?, ?, 1, 1)",
                    (key, ctx.tool, json.dumps(result)),
                )
        db.close()
        return result

    def effects(self) -> dict[str, int]:
        """Actions taken per idempotency key."""
        return self._column("effects")

    def calls(self) -> dict[str, int]:
        """Calls per idempotency key (repeats the tool honoured included)."""
        return self._column("calls")

    def _column(self, column: str) -> dict[str, int]:
        with sqlite3.connect(self.path, timeout=30) as db:
            rows = db.execute(f"SELECT key, {column} FROM ledger ORDER BY key").fetchall()  # noqa: S608
        db.close()
        return dict(rows)


def order_tools(ledger: EffectLedger | None = None) -> list[Tool]:
    """`get_order` (a lookup) and `create_ticket` (idempotent: it honours its key)."""

    def get_order(ctx: ToolContext) -> Any:
        return {"order_id": ctx.args["order_id"], "payment": "paid", "shipment": "not_shipped"}

    def create_ticket(ctx: ToolContext) -> Any:
        ticket = {"ticket_id": "T-9001", "order_id": ctx.args["order_id"]}
        if ledger is None:
            return ticket
        return ledger.act(ctx, ticket, honour_key=True)

    return [
        Tool("get_order", get_order, side_effects=False),
        Tool("create_ticket", create_ticket, idempotent=True),
    ]


def demo_main(
    run_all: Callable[[Path, Path | None], object], doc: str, argv: list[str] | None = None
) -> None:
    """A demo's command line: `--dir` keeps its store (else a temp dir), `--export` its log."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--dir", type=Path, help="keep the store here (default: a temp dir)")
    parser.add_argument("--export", type=Path, help="write the runs' events as JSON Lines")
    args = parser.parse_args(argv)
    quiet_logs()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
        run_all(args.dir, args.export)
        return
    with tempfile.TemporaryDirectory() as tmp:
        run_all(Path(tmp), args.export)
