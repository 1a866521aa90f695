"""Shared fixtures: the worked runs of the reference articles, and one PostgreSQL server."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentfsm import Event, read_events
from agentfsm.fsm import registry
from agentfsm.testing.fixtures.postgres_server import postgres_server, unavailable_reason

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


@pytest.fixture(autouse=True)
def _registry_per_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables a test `register()`s stay in that test: the registry is process-wide, and with
    tests in random order one test's registrations would change what another looks up."""
    monkeypatch.setattr(registry, "_registered", dict(registry._registered))


_prefixes = itertools.count()


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """A PostgreSQL server for the session: `AGENTFSM_TEST_POSTGRES_DSN`, else a throwaway
    one. Without one the tests skip, saying how to run them; with `CI=true` they fail."""
    reason = unavailable_reason()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so the PostgreSQL tests must run: {reason}")
        pytest.skip(reason)
    if dsn := os.environ.get("AGENTFSM_TEST_POSTGRES_DSN"):
        yield dsn
        return
    with postgres_server() as server:
        yield server.dsn


@pytest.fixture
def pg_prefix() -> str:
    """Fresh table names for one test, so tests never see each other's runs."""
    return f"t{os.getpid()}_{next(_prefixes)}_"
