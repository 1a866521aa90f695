"""Fixtures for the runtime tests: a throwaway PostgreSQL server (as the store tests start it)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from agentfsm.testing.postgres_server import postgres_server, unavailable_reason

_prefixes = itertools.count()


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    """`AGENTFSM_TEST_POSTGRES_DSN`, else a throwaway server; with `CI=true` never a skip."""
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
    """Fresh table names for one test."""
    return f"rt{os.getpid()}_{next(_prefixes)}_"
