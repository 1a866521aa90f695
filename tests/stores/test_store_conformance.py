"""Every backend, sync and async, against the shipped conformance suite."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import attrs
import pytest

from agentfsm.stores import (
    AsyncEventStore,
    EventStore,
    MemoryEventStore,
    MemoryStorage,
    SQLiteEventStore,
    StoreOptions,
    ThreadedAsyncEventStore,
)
from agentfsm.testing import AsyncStoreConformance, StoreConformance, Tamper
from tests.stores.conftest import MemoryTamper, PostgresTamper, SQLiteTamper


class TestMemoryStore(StoreConformance):
    """The in-memory store meets the contract."""

    @pytest.fixture
    def storage(self) -> MemoryStorage:
        return MemoryStorage()

    @pytest.fixture
    def make_store(self, storage: MemoryStorage) -> Callable[[StoreOptions], EventStore]:
        return lambda options: MemoryEventStore(storage, options=options)

    @pytest.fixture
    def tamper(self, storage: MemoryStorage) -> Tamper:
        return MemoryTamper(storage)


class TestSQLiteStore(StoreConformance):
    """The SQLite store meets the contract."""

    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[StoreOptions], EventStore]:
        return lambda options: SQLiteEventStore(tmp_path / "runs.db", options=options)

    @pytest.fixture
    def tamper(self, tmp_path: Path) -> Tamper:
        return SQLiteTamper(tmp_path / "runs.db")


class TestPostgresStore(StoreConformance):
    """The PostgreSQL store meets the contract."""

    @pytest.fixture
    def make_store(self, postgres_dsn: str, pg_prefix: str) -> Callable[[StoreOptions], EventStore]:
        from agentfsm.stores.postgres import PostgresEventStore

        # Each handle migrates: the first one's key is the store's (as at a deployment's
        # first start), so a test may make the store keyed.
        return lambda options: PostgresEventStore(
            postgres_dsn, options=options, table_prefix=pg_prefix, migrate=True
        )

    @pytest.fixture
    def tamper(self, postgres_dsn: str, pg_prefix: str) -> Tamper:
        return PostgresTamper(postgres_dsn, pg_prefix)


class TestThreadedSQLiteStore(AsyncStoreConformance):
    """The SQLite store on a worker thread meets the async contract."""

    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[StoreOptions], object]:
        async def open_(options: StoreOptions) -> AsyncEventStore:
            return ThreadedAsyncEventStore(SQLiteEventStore(tmp_path / "runs.db", options=options))

        return open_

    @pytest.fixture
    def tamper(self, tmp_path: Path) -> Tamper:
        return SQLiteTamper(tmp_path / "runs.db")


class TestThreadedMemoryStore(AsyncStoreConformance):
    """The memory store on a worker thread meets the async contract."""

    @pytest.fixture
    def make_store(self) -> Callable[[StoreOptions], object]:
        storage = MemoryStorage()

        async def open_(options: StoreOptions) -> AsyncEventStore:
            return ThreadedAsyncEventStore(MemoryEventStore(storage, options=options))

        return open_


class TestAsyncPostgresStore(AsyncStoreConformance):
    """The natively async PostgreSQL store meets the async contract."""

    @pytest.fixture
    def make_store(self, postgres_dsn: str, pg_prefix: str) -> Callable[[StoreOptions], object]:
        from agentfsm.stores.postgres import AsyncPostgresEventStore

        async def open_(options: StoreOptions) -> AsyncEventStore:
            return await AsyncPostgresEventStore.connect(
                postgres_dsn, options=options, table_prefix=pg_prefix, migrate=True
            )

        return open_

    @pytest.fixture
    def tamper(self, postgres_dsn: str, pg_prefix: str) -> Tamper:
        return PostgresTamper(postgres_dsn, pg_prefix)


class TestSQLiteStoreWithoutCache(StoreConformance):
    """The SQLite store meets the contract when every append loads the run anew."""

    @pytest.fixture
    def make_store(self, tmp_path: Path) -> Callable[[StoreOptions], EventStore]:
        return lambda options: SQLiteEventStore(
            tmp_path / "runs.db", options=attrs.evolve(options, cache_size=0)
        )

    @pytest.fixture
    def tamper(self, tmp_path: Path) -> Tamper:
        return SQLiteTamper(tmp_path / "runs.db")
