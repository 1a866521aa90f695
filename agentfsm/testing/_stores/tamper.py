"""Tampering with a store's rows: the `Tamper` protocol and the forged data the checks use.

Shared by the integrity checks of `integrity_checks` and its snapshot checks, which both
edit a backend's rows behind its API to see what it trusts.
"""

from __future__ import annotations

import json
from collections.abc import Callable, MutableMapping
from typing import Any, Protocol

from agentfsm.events._canonical import canonical_json
from agentfsm.events.builder import LogBuilder
from agentfsm.events.codec import event_to_dict
from agentfsm.events.models import Event
from agentfsm.stores._integrity import PLAIN, Integrity
from agentfsm.stores.base import EventStore
from agentfsm.stores.rows import StoredSnapshot

__all__ = [
    "KEY",
    "OpenStore",
    "Tamper",
    "approved_in_snapshot",
    "chain",
    "ignored_snapshot_reasons",
    "payment_waiting_for_approval",
]

#: The integrity key the keyed checks use.
KEY = b"a test key of thirty-two bytes!!"


class Tamper(Protocol):
    """Direct access to a backend's rows, to simulate damage the API cannot cause."""

    def set_event_data(self, run_id: str, sequence: int, data: str) -> None:
        """Overwrite the stored line of one event."""

    def set_event_hash(self, run_id: str, sequence: int, hash: str) -> None:
        """Overwrite the stored chain hash of one event."""

    def delete_event(self, run_id: str, sequence: int) -> None:
        """Remove one event row."""

    def set_snapshot(self, run_id: str, snapshot: StoredSnapshot) -> None:
        """Write the run's snapshot row, every column as given."""

    def set_runs_version(self, run_id: str, version: int) -> None:
        """Overwrite the version of the run's runs row (and nothing else)."""


def chain(events: list[Event], integrity: Integrity = PLAIN) -> list[str]:
    """Each event's chain hash, computed independently of any store."""
    hashes: list[str] = []
    previous = ""
    for event in events:
        previous = integrity.link(previous, canonical_json(event_to_dict(event)))
        hashes.append(previous)
    return hashes


def payment_waiting_for_approval(run_id: str) -> list[Event]:
    """A run whose one call, a payment of 1,000,000, waits for a person's approval."""
    log = LogBuilder(run_id)
    log.add("run.started", objective="pay", limits={"max_turns": 3})
    log.add("model.started")
    call = {"action_id": "t1.1", "tool": "pay", "arguments": {"amount": 1_000_000}}
    log.add("model.completed", decision="tool_calls", tool_calls=[call])
    log.add("approval.requested", **call)
    return log.events


def approved_in_snapshot(data: str) -> str:
    """The snapshot text with its pending call approved, the run running, limits gone."""
    snapshot: Any = json.loads(data)
    record = snapshot["record"]
    record["status"] = "running"
    record["limits"] = None
    record["actions"]["t1.1"]["status"] = "approved"
    record["actions"]["t1.1"]["approver"] = "nobody"
    record["pending_approvals"] = []
    return json.dumps(snapshot)


def ignored_snapshot_reasons(logs: list[MutableMapping[str, Any]]) -> list[str]:
    """The reasons of the `store.snapshot_ignored` entries among captured logs."""
    return [entry["reason"] for entry in logs if entry["event"] == "store.snapshot_ignored"]


#: What `open_store` is: opens a handle with `StoreOptions(**kwargs)`.
OpenStore = Callable[..., EventStore]
