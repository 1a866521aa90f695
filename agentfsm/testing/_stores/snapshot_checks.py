"""Snapshots are a cache, never an authority: what every store must refuse to trust.

Mixed into `IntegrityChecks` (so run by `StoreConformance` with a `tamper` fixture): a
snapshot edited in place, with or without its digest recomputed, of another version,
beyond the log, unreadable, of a replaced event, or sealed without the store's key.
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from agentfsm.errors import LifecycleError
from agentfsm.events.builder import LogBuilder
from agentfsm.reducers.reduce import replay
from agentfsm.reducers.snapshot import Snapshot
from agentfsm.stores._integrity import Integrity
from agentfsm.stores.rows import StoredSnapshot
from agentfsm.testing._stores.scripted import scripted_run
from agentfsm.testing._stores.tamper import (
    KEY,
    OpenStore,
    Tamper,
    approved_in_snapshot,
    chain,
    ignored_snapshot_reasons,
    payment_waiting_for_approval,
)

__all__ = ["SnapshotIntegrityChecks"]


class SnapshotIntegrityChecks:
    """The snapshot part of `IntegrityChecks` (its fixtures: `open_store`, `store`, `tamper`)."""

    def test_a_snapshot_edited_in_place_is_ignored(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """A snapshot edited to approve a pending payment (digest left as it was) is not
        trusted: the run is replayed, the call still waits, and running it is refused."""
        events = payment_waiting_for_approval("pay-1")
        open_store(snapshot_every=4).append("pay-1", events, 0)
        real = open_store(snapshot_every=4)._read_snapshot("pay-1")
        assert real is not None
        forged = StoredSnapshot(4, real.event_hash, approved_in_snapshot(real.data), real.digest)
        tamper.set_snapshot("pay-1", forged)
        reader = open_store(snapshot_every=4)
        with capture_logs() as logs:
            record = reader.load("pay-1")
        assert record.dumps() == replay(events).dumps()
        assert record.actions["t1.1"].status == "approval_pending"
        assert ignored_snapshot_reasons(logs) == [
            "its digest does not match its content: it was changed after it was written"
        ]
        run = LogBuilder("pay-1", start=5)
        run.add("tool.requested", action_id="t1.1", tool="pay", arguments={"amount": 1_000_000})
        with pytest.raises(LifecycleError):
            reader.append("pay-1", run.events, 4)
        report = reader.verify("pay-1")
        assert (report.ok, report.sequence) == (False, 4)
        assert report.problem == (
            "the snapshot is not to be trusted: its digest does not match its content: it "
            "was changed after it was written"
        )

    def test_verify_finds_a_forged_snapshot_whose_digest_was_recomputed(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """Without a key anyone can recompute a digest; `verify` still compares the snapshot
        with the fold of its events and names the fields that differ."""
        events = payment_waiting_for_approval("pay-1")
        open_store(snapshot_every=4).append("pay-1", events, 0)
        real = open_store(snapshot_every=4)._read_snapshot("pay-1")
        assert real is not None
        data = approved_in_snapshot(real.data)
        tamper.set_snapshot(
            "pay-1",
            StoredSnapshot(4, real.event_hash, data, Integrity().seal(real.event_hash, data)),
        )
        report = open_store(snapshot_every=4).verify("pay-1")
        assert (report.ok, report.sequence, report.checked) == (False, 4, 4)
        assert report.problem == (
            "the snapshot does not hold what the events it covers fold into (it differs in "
            "status, limits, actions): it was changed, or taken under another table"
        )

    def test_a_snapshot_with_a_wrong_version_is_ignored(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """A snapshot that disagrees with its row falls back to full replay, and says so."""
        events = scripted_run("r1", 2)
        open_store(snapshot_every=5).append("r1", events, 0)
        wrong = Snapshot(replay(events[:6])).dumps()
        at_11 = chain(events)[10]
        tamper.set_snapshot("r1", StoredSnapshot(11, at_11, wrong, Integrity().seal(at_11, wrong)))
        with capture_logs() as logs:
            record = open_store(snapshot_every=5).load("r1")
        assert record.dumps() == replay(events).dumps()
        assert logs == [
            {
                "event": "store.snapshot_ignored",
                "log_level": "warning",
                "run_id": "r1",
                "sequence": 11,
                "reason": "it says sequence 6 but is stored as 11",
                "fallback": "full replay",
            }
        ]

    def test_a_snapshot_beyond_the_log_is_ignored(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """A snapshot claiming a sequence the log does not have is never trusted."""
        events = scripted_run("r1", 1)
        open_store(snapshot_every=None).append("r1", events, 0)
        ahead = scripted_run("r1", 2)
        data, at_11 = Snapshot(replay(ahead)).dumps(), chain(ahead)[10]
        tamper.set_snapshot("r1", StoredSnapshot(11, at_11, data, Integrity().seal(at_11, data)))
        with capture_logs() as logs:
            record = open_store(snapshot_every=None).load("r1")
        assert record.dumps() == replay(events).dumps()
        assert [(log["sequence"], log["reason"]) for log in logs] == [
            (11, "the log has no event at sequence 11")
        ]
        report = open_store().verify("r1")
        assert (report.ok, report.sequence, report.problem) == (
            False,
            11,
            "the snapshot covers sequence 11, which the log does not hold",
        )

    def test_an_unreadable_snapshot_is_ignored(self, open_store: OpenStore, tamper: Tamper) -> None:
        """A snapshot that is not JSON is ignored and the log replayed."""
        events = scripted_run("r1", 1)
        open_store(snapshot_every=3).append("r1", events, 0)
        at_6 = chain(events)[5]
        tamper.set_snapshot(
            "r1", StoredSnapshot(6, at_6, "{broken", Integrity().seal(at_6, "{broken"))
        )
        with capture_logs() as logs:
            record = open_store(snapshot_every=3).load("r1")
        assert record.dumps() == replay(events).dumps()
        assert ignored_snapshot_reasons(logs) == [
            "it does not read back (Expecting property name enclosed in double quotes: "
            "line 1 column 2 (char 1))"
        ]

    def test_a_snapshot_of_a_replaced_event_is_ignored(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """A snapshot is bound to the hash of the event it covers; a changed event unbinds it."""
        events = scripted_run("r1", 1)
        open_store(snapshot_every=6).append("r1", events, 0)
        tamper.set_event_hash("r1", 6, "f" * 64)
        with capture_logs() as logs:
            record = open_store(snapshot_every=6).load("r1")
        assert record.dumps() == replay(events).dumps()
        assert ignored_snapshot_reasons(logs) == [
            "the log's event at sequence 6 is not the one it covers"
        ]

    def test_a_keyed_store_ignores_a_snapshot_sealed_without_the_key(
        self, open_store: OpenStore, tamper: Tamper
    ) -> None:
        """A forged snapshot with a recomputed plain digest is not trusted under a key."""
        events = payment_waiting_for_approval("pay-1")
        open_store(integrity_key=KEY, snapshot_every=4).append("pay-1", events, 0)
        real = open_store(integrity_key=KEY)._read_snapshot("pay-1")
        assert real is not None
        assert real.digest.startswith("hmac-sha256:")
        data = approved_in_snapshot(real.data)
        resealed = Integrity().seal(real.event_hash, data)
        tamper.set_snapshot("pay-1", StoredSnapshot(4, real.event_hash, data, resealed))
        with capture_logs() as logs:
            record = open_store(integrity_key=KEY).load("pay-1")
        assert record.actions["t1.1"].status == "approval_pending"
        assert ignored_snapshot_reasons(logs) == [
            "its digest does not match its content: it was changed after it was written"
        ]
