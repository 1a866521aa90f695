"""Snapshots: a record and the sequence it covers, so a long log need not be folded anew.

`replay(tail, snapshot=s)` equals the full replay whenever `tail` holds the events after
`s.sequence`; the property tests check it at every cut.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from agentfsm.record import RunRecord

__all__ = ["Snapshot"]


@attrs.frozen
class Snapshot:
    """A run record as of `sequence` (always `record.version`).

    Attributes:
        record: the folded record.
    """

    record: RunRecord

    @property
    def sequence(self) -> int:
        """The last sequence the snapshot covers."""
        return self.record.version

    @property
    def run_id(self) -> str:
        """The run."""
        return self.record.run_id

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict: `{"sequence": n, "record": {...}}`."""
        return {"sequence": self.sequence, "record": self.record.to_json()}

    def dumps(self) -> str:
        """Deterministic JSON text (the record's ledger in its order: `RunRecord.dumps`)."""
        return f'{{"record":{self.record.dumps()},"sequence":{self.sequence}}}'

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Snapshot:
        """Read a snapshot; its `sequence` must match the record's version.

        Raises:
            ValueError: naming what is wrong.
        """
        if not isinstance(data, Mapping) or set(data) != {"sequence", "record"}:
            raise ValueError("a snapshot is a JSON object with exactly 'sequence' and 'record'")
        record = RunRecord.from_json(data["record"])
        if data["sequence"] != record.version:
            raise ValueError(
                f"snapshot of run '{record.run_id}' says sequence {data['sequence']!r} "
                f"but its record is at version {record.version}"
            )
        return cls(record)

    @classmethod
    def loads(cls, text: str | bytes) -> Snapshot:
        """Read a snapshot from `dumps` output."""
        return cls.from_json(json.loads(text))
