"""What every store is configured with: the reducer, snapshots, the head cache, integrity,
and an external anchor."""

from __future__ import annotations

import attrs

from agentfsm.reducers.reduce import DEFAULT_REDUCER, Reducer
from agentfsm.stores._integrity import Integrity, key_from_env
from agentfsm.stores.anchor import Anchor, anchor_from_env, to_anchor

__all__ = ["DEFAULT_SNAPSHOT_EVERY", "StoreOptions"]

#: Snapshot after this many events unless told otherwise. A snapshot is the whole record,
#: and the record's action ledger grows with the run, so writing one costs O(run) at append
#: time; reading one back costs about the same whatever the interval. Measured on a
#: 10,001-event run: load ~30 ms with a snapshot vs ~340 ms without, while snapshotting
#: every 500 events added ~75% to batched append time. 1,000 halves that and leaves at
#: most 999 events to fold (~15 ms).
DEFAULT_SNAPSHOT_EVERY = 1000


def _check_snapshot_every(_: object, __: object, value: int | None) -> None:
    if value is not None and value < 1:
        raise ValueError(f"snapshot_every must be at least 1 or None, got {value}")


def _check_cache_size(_: object, __: object, value: int) -> None:
    if value < 0:
        raise ValueError(f"cache_size must not be negative, got {value}")


@attrs.frozen
class StoreOptions:
    """What every store is configured with.

    Attributes:
        reducer: validates appends and folds loads (the default table's unless given).
        snapshot_every: write a snapshot each time a batch crosses a multiple of this many
            events, spaced out by powers of two once the ledger holds more than a quarter
            as many actions (see `_cadence.py`); None never snapshots.
        cache_size: how many runs' latest records a handle keeps, so an append that follows
            the handle's own last append need not load the run again (0 turns it off).
        integrity_key: a secret (at least 16 bytes) that makes the hash chain and the
            snapshot digests HMACs, so rows changed by anyone without it are detected on
            load and by `verify`. Read from `AGENTFSM_INTEGRITY_KEY` when not given; None
            turns it off. A store records which key it is under, and refuses a handle
            with another (`IntegrityKeyError`); `agentfsm rekey` changes it.
        anchor: where each run's head is kept outside the store (an `Anchor`, or a file
            path for a `FileAnchor`): told after every commit, read back at every load,
            so a log shorter than its anchor is refused (`TruncatedLogError`). Read from
            `AGENTFSM_ANCHOR` when not given; None keeps no anchor.
    """

    reducer: Reducer = DEFAULT_REDUCER
    snapshot_every: int | None = attrs.field(
        default=DEFAULT_SNAPSHOT_EVERY, validator=_check_snapshot_every
    )
    cache_size: int = attrs.field(default=1024, validator=_check_cache_size)
    integrity_key: bytes | None = attrs.field(factory=key_from_env, repr=False)
    integrity: Integrity = attrs.field(init=False, repr=False)
    anchor: Anchor | None = attrs.field(factory=anchor_from_env, converter=to_anchor)

    @integrity.default
    def _integrity(self) -> Integrity:
        return Integrity(self.integrity_key)
