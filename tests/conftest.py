"""Shared fixtures: the two worked runs of the reference articles, as parsed events."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentfsm import Event, read_events

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_log(name: str) -> list[Event]:
    """The events of a bundled JSONL log under examples/."""
    with (EXAMPLES / name).open(encoding="utf-8") as lines:
        return [event for _, event in read_events(lines)]


@pytest.fixture
def order_events() -> list[Event]:
    """Order O-1001 looked up, ticket T-9001 opened, the answer accepted."""
    return load_log("order_ticket.jsonl")


@pytest.fixture
def cancel_events() -> list[Event]:
    """Cancel order 123, with a human approval bound to the exact call."""
    return load_log("cancel_order_approval.jsonl")
