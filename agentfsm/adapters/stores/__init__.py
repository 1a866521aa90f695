"""Durable event stores behind one contract: memory, SQLite (the embedded default), PostgreSQL.

`PostgresEventStore` and `AsyncPostgresEventStore` need the `postgres` extra
(`pip install 'agentfsm[postgres]'`); import them from `agentfsm.adapters.stores.postgres`.
"""

from agentfsm.adapters.stores._core import (
    GENESIS_HASH,
    Attachment,
    RunInfo,
    StoredEvent,
    StoredSnapshot,
    VerifyReport,
    chain_hash,
)
from agentfsm.adapters.stores.base import (
    DEFAULT_SNAPSHOT_EVERY,
    AsyncEventStore,
    EventStore,
    StoreOptions,
)
from agentfsm.adapters.stores.memory import MemoryEventStore, MemoryStorage
from agentfsm.adapters.stores.sqlite import SQLiteEventStore
from agentfsm.adapters.stores.threaded import ThreadedAsyncEventStore
from agentfsm.fsm.errors import RunNotFoundError

__all__ = [
    "DEFAULT_SNAPSHOT_EVERY",
    "GENESIS_HASH",
    "AsyncEventStore",
    "Attachment",
    "EventStore",
    "MemoryEventStore",
    "MemoryStorage",
    "RunInfo",
    "RunNotFoundError",
    "SQLiteEventStore",
    "StoreOptions",
    "StoredEvent",
    "StoredSnapshot",
    "ThreadedAsyncEventStore",
    "VerifyReport",
    "chain_hash",
]
