"""The latest record per run a store handle has seen, so an append need not load it again."""

from __future__ import annotations

from collections import OrderedDict

from agentfsm.stores._rows import Head

__all__ = ["HeadCache"]


class HeadCache:
    """The latest record (and chain hash) per run that this handle wrote or read.

    A run's record at a given version never changes (the log is append-only and
    `(run_id, sequence)` is unique), so a cached head is always right *for its version*;
    the write transaction still checks the stored version, so a stale cache costs a
    conflict, never a fork.
    """

    __slots__ = ("_heads", "_size")

    def __init__(self, size: int) -> None:
        self._heads: OrderedDict[str, Head] = OrderedDict()
        self._size = size

    def at(self, run_id: str, version: int) -> Head | None:
        head = self._heads.get(run_id)
        return head if head is not None and head.record.version == version else None

    def put(self, run_id: str, head: Head) -> None:
        if self._size == 0:
            return
        self._heads[run_id] = head
        self._heads.move_to_end(run_id)
        if len(self._heads) > self._size:
            self._heads.popitem(last=False)

    def drop(self, run_id: str) -> None:
        self._heads.pop(run_id, None)
