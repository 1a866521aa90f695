"""What the SDK adapter tests share: reading a run's types back, validating its log."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from agentfsm.adapters.stores.base import EventStore
from agentfsm.cli import main as cli
from agentfsm.events import dump_event


def types(store: EventStore, run_id: str) -> list[str]:
    """The run's event types, in order."""
    return [e.type for e in store.events(run_id)]


def validates(store: EventStore, run_id: str, tmp_path: Path) -> int:
    """Exit status of `agentfsm validate` on the run's log written as JSON Lines."""
    path = tmp_path / f"{run_id.replace('/', '_')}.jsonl"
    path.write_text("".join(dump_event(e) + "\n" for e in store.events(run_id)))
    return cli(["validate", "--quiet", str(path)])


def run(coro: Any) -> Any:
    """Run a coroutine with the transition logs captured."""
    with capture_logs():
        return asyncio.run(coro)
