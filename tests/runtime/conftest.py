"""Fixtures for the runtime tests (the PostgreSQL server is in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runtime import _pq_app


@pytest.fixture
def pq_dsn(postgres_dsn: str) -> Iterator[str]:
    """A fresh database on the session's server, for the Procrastinate engine's tests:
    Procrastinate's tables are not prefixed, so each test gets a database of its own."""
    with _pq_app.fresh_database(postgres_dsn) as dsn:
        yield dsn
