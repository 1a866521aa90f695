"""The in-memory store: for tests and embedding. Nothing survives the process.

It keeps the same rows the durable stores keep (lines, chained hashes, a runs table, one
snapshot per run, a meta table holding the key record), so the conformance suite checks
it exactly like the others, and several handles can share one `MemoryStorage` the way
processes share a database file: a handle under another key than the storage's first one
is refused like a process opening a keyed SQLite file without its key.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

import attrs

from agentfsm.stores._checks import conflict
from agentfsm.stores._keys import META_KEY, key_refusal
from agentfsm.stores._rows import Attachment, PreparedAppend, RunInfo, StoredEvent, StoredSnapshot
from agentfsm.stores.base import EventStore, StoreOptions

__all__ = ["MemoryEventStore", "MemoryStorage"]


@attrs.define
class MemoryStorage:
    """The tables of a memory store; share one between handles to share the data.

    Attributes:
        runs: the runs table, by run id.
        events: each run's log rows, in sequence order.
        snapshots: each run's snapshot row.
        attachments: each attachment, by `(run_id, name)`.
        meta: the store's meta (its key record, under `integrity`).
        lock: held for every write and read, so handles on several threads agree.
    """

    runs: dict[str, RunInfo] = attrs.field(factory=dict)
    events: dict[str, list[StoredEvent]] = attrs.field(factory=dict)
    snapshots: dict[str, StoredSnapshot] = attrs.field(factory=dict)
    attachments: dict[tuple[str, str], Attachment] = attrs.field(factory=dict)
    meta: dict[str, str] = attrs.field(factory=dict)
    lock: threading.Lock = attrs.field(factory=threading.Lock)


class MemoryEventStore(EventStore):
    """An `EventStore` in a dict.

    Args:
        storage: the tables to use (a fresh, empty `MemoryStorage` unless given).
        options: reducer, snapshot interval and cache size.
    """

    def __init__(
        self, storage: MemoryStorage | None = None, *, options: StoreOptions | None = None
    ) -> None:
        super().__init__(options)
        self.storage = storage if storage is not None else MemoryStorage()
        self._open_key_check()

    def _read_run(self, run_id: str) -> RunInfo | None:
        with self.storage.lock:
            return self.storage.runs.get(run_id)

    def _read_rows(self, run_id: str, after: int) -> Iterator[StoredEvent]:
        with self.storage.lock:
            rows = list(self.storage.events.get(run_id, ()))
        # Rows are kept in order, so a row's index is its sequence - 1 unless the list was
        # tampered with; filter rather than slice so a tampered list still reads honestly.
        return (row for row in rows if row.sequence > after)

    def _read_snapshot(self, run_id: str) -> StoredSnapshot | None:
        with self.storage.lock:
            return self.storage.snapshots.get(run_id)

    def _write(self, prepared: PreparedAppend) -> None:
        storage = self.storage
        run_id = prepared.run_id
        with storage.lock:
            current = storage.runs.get(run_id)
            actual = current.version if current is not None else 0
            log = storage.events.setdefault(run_id, [])
            # (run_id, sequence) is unique here too: the log is sorted, so its last row
            # decides whether the batch's first sequence is already taken.
            taken = bool(log) and log[-1].sequence >= prepared.rows[0].sequence
            refused = key_refusal(storage.meta.get(META_KEY), self.options.integrity)
            if refused is not None:
                raise refused
            if actual != prepared.expected_version or taken:
                raise conflict(run_id, prepared.expected_version, actual)
            log.extend(prepared.rows)
            storage.runs[run_id] = prepared.info
            if prepared.snapshot is not None:
                storage.snapshots[run_id] = prepared.snapshot

    def _read_meta(self, key: str) -> str | None:
        with self.storage.lock:
            return self.storage.meta.get(key)

    def _put_meta(self, key: str, value: str, *, expected: str | None) -> bool:
        with self.storage.lock:
            if self.storage.meta.get(key) != expected:
                return False
            self.storage.meta[key] = value
            return True

    def _rewrite_run(
        self,
        run_id: str,
        version: int,
        hashes: Sequence[tuple[int, str]],
        snapshot: StoredSnapshot | None,
        record: str,
    ) -> bool:
        storage = self.storage
        with storage.lock:
            info = storage.runs.get(run_id)
            if storage.meta.get(META_KEY) != record or info is None or info.version != version:
                return False
            new = dict(hashes)
            storage.events[run_id] = [
                attrs.evolve(row, hash=new[row.sequence]) if row.sequence in new else row
                for row in storage.events[run_id]
            ]
            if snapshot is None:
                storage.snapshots.pop(run_id, None)
            else:
                storage.snapshots[run_id] = snapshot
            return True

    def _write_attachment(self, attachment: Attachment) -> None:
        with self.storage.lock:
            self.storage.attachments[attachment.run_id, attachment.name] = attachment

    def _read_attachment(self, run_id: str, name: str) -> Attachment | None:
        with self.storage.lock:
            return self.storage.attachments.get((run_id, name))

    def _delete_attachment(self, run_id: str, name: str) -> bool:
        with self.storage.lock:
            return self.storage.attachments.pop((run_id, name), None) is not None

    def _list_runs(
        self, statuses: tuple[str, ...] | None, limit: int | None, after: str | None
    ) -> list[RunInfo]:
        with self.storage.lock:
            infos = sorted(self.storage.runs.values(), key=lambda info: info.run_id)
        return [
            info
            for info in infos
            if (statuses is None or info.status in statuses)
            and (after is None or info.run_id > after)
        ][:limit]
