"""Durable event stores behind one contract: memory, SQLite (the embedded default), PostgreSQL.

Each keeps its runs' leases too (`EventStore.hold`, `EventStore.holder`): one driver per run.

`PostgresEventStore` and `AsyncPostgresEventStore` need the `postgres` extra
(`pip install 'agentfsm[postgres]'`); import them from `agentfsm.stores.postgres`.
"""

from agentfsm.errors import RunNotFoundError
from agentfsm.stores._integrity import chain_hash
from agentfsm.stores.anchor import Anchor, AnchoredHead, FileAnchor
from agentfsm.stores.base import (
    DEFAULT_SNAPSHOT_EVERY,
    AsyncEventStore,
    EventStore,
    StoreOptions,
)
from agentfsm.stores.lease import LEASE_TTL, AsyncLease, HeldLease, Holder, Lease
from agentfsm.stores.leases import LeaseStore, MemoryLeases, SQLiteLeases
from agentfsm.stores.memory import MemoryEventStore, MemoryStorage
from agentfsm.stores.rekey import RekeyReport, rekey
from agentfsm.stores.rows import (
    GENESIS_HASH,
    Attachment,
    Folded,
    StoredEvent,
    StoredSnapshot,
    VerifyReport,
)
from agentfsm.stores.runs import COUNT_EXACT_UP_TO, RUN_ORDERS, RunCount, RunInfo, RunOrder
from agentfsm.stores.sqlite import SQLiteEventStore
from agentfsm.stores.threaded import ThreadedAsyncEventStore

__all__ = [
    "COUNT_EXACT_UP_TO",
    "DEFAULT_SNAPSHOT_EVERY",
    "GENESIS_HASH",
    "LEASE_TTL",
    "RUN_ORDERS",
    "Anchor",
    "AnchoredHead",
    "AsyncEventStore",
    "AsyncLease",
    "Attachment",
    "EventStore",
    "FileAnchor",
    "Folded",
    "HeldLease",
    "Holder",
    "Lease",
    "LeaseStore",
    "MemoryEventStore",
    "MemoryLeases",
    "MemoryStorage",
    "RekeyReport",
    "RunCount",
    "RunInfo",
    "RunNotFoundError",
    "RunOrder",
    "SQLiteEventStore",
    "SQLiteLeases",
    "StoreOptions",
    "StoredEvent",
    "StoredSnapshot",
    "ThreadedAsyncEventStore",
    "VerifyReport",
    "chain_hash",
    "rekey",
]
