"""Re-keying a store: every link and snapshot digest rewritten under a new integrity key.

`rekey(store, new_key)` takes a handle opened with the store's current key (None for a
keyless store) and moves the store to `new_key` (None removes the key):

1. On a store that is not being re-keyed yet, every run's chain is checked under the
   current key first; a run that does not check out refuses the re-key, and nothing changes
   (re-signing a row someone without the key wrote would make it look genuine).
2. The store's key record becomes `rekeying <old> -> <new>` (`_keys.py`): from then on every
   handle is refused, under either key, and every write too, since half the runs are under
   each key. (PostgreSQL waits for the appends in flight to commit first.)
3. Run by run, in run id order, one transaction each: the chain is checked under the old key
   as it is read, each link recomputed under the new one, the snapshot resealed (or dropped,
   if it was not sealed under the old key), and written only if the run is still at the
   version it was read at.
4. The key record becomes the new key's.

Killed at any point, it is resumed by running it again with the same keys: a run whose first
link is under the new key is done (each run is rewritten whole or not at all), so the runs
left are rewritten and the record set. A run's rewrite holds its hashes in memory (64 bytes
an event); runs are listed a page at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

import attrs

from agentfsm.errors import ConcurrencyConflictError, CorruptLogError, IntegrityKeyError
from agentfsm.events._canonical import canonical_text
from agentfsm.stores._integrity import Integrity
from agentfsm.stores._keys import META_KEY, describe, key_refusal, rekeying, rekeying_keys
from agentfsm.stores._load import BAD_LINK, close_iterator, distrust
from agentfsm.stores.anchor import AnchoredHead
from agentfsm.stores.base import EventStore
from agentfsm.stores.rows import GENESIS_HASH, StoredEvent, StoredSnapshot

__all__ = ["RekeyReport", "rekey"]

#: How often a run whose version moves while it is rewritten is read again before the
#: re-key stops.
REKEY_TRIES = 5
_PAGE = 500


@attrs.frozen
class RekeyReport:
    """What a re-key did.

    Attributes:
        old: the key record the store was under (`unkeyed` or `hmac-sha256:<key id>`).
        new: the key record it is under now.
        rewritten: runs rewritten by this call.
        done: runs an earlier, interrupted call had rewritten already.
    """

    old: str
    new: str
    rewritten: int
    done: int

    def __str__(self) -> str:
        runs = f"{self.rewritten:,} run{'' if self.rewritten == 1 else 's'}"
        earlier = f" ({self.done:,} were done already)" if self.done else ""
        return f"re-keyed {runs} from {describe(self.old)} to {describe(self.new)}{earlier}"


def rekey(store: EventStore, new_key: bytes | None) -> RekeyReport:
    """Rewrite every link and snapshot digest of the store under `new_key` (see the module).

    Args:
        store: a handle opened with the store's current key (`StoreOptions(integrity_key=)`),
            or on a store an interrupted re-key to `new_key` left behind.
        new_key: the key from now on; None removes the key.

    Raises:
        ValueError: `new_key` is the store's key already, or too short.
        IntegrityKeyError: the store is being re-keyed to or from other keys.
        CorruptLogError: a run's chain does not check out under the old key; nothing of that
            run was rewritten (the message says whether the store is as it was, or stays
            half re-keyed until the run is repaired and `rekey` runs again).
        NotImplementedError: the store's backend cannot be re-keyed.
        ConcurrencyConflictError: a run kept changing while it was rewritten (a writer that
            does not check the key record); a note says where the store is left.
    """
    old = store.options.integrity
    new = Integrity(new_key)
    if new.record == old.record:
        raise ValueError(f"the store is under {describe(old.record)} already: nothing to re-key")
    moving = rekeying(old.record, new.record)
    found = store._read_meta(META_KEY)
    fresh = found == old.record
    if fresh:
        for run_id in _run_ids(store):
            problem = _relink(store, run_id, old, new)[1]
            if problem is not None:
                raise _refused(run_id, problem, "nothing was re-keyed: the store is as it was")
        if not store._put_meta(META_KEY, moving, expected=old.record):
            raise _other(store._read_meta(META_KEY), old)
    elif found != moving:
        raise _other(found, old)
    rewritten = done = 0
    for run_id in _run_ids(store):
        if _under(store, run_id, new):
            done += 1
            continue
        untouched = fresh and rewritten == 0 and done == 0
        try:
            problem = _rewrite(store, run_id, old, new, moving)
        except ConcurrencyConflictError as exc:
            exc.add_note(_stopped(store, untouched, old.record, moving, "stop the writer"))
            raise
        if problem is not None:
            raise _refused(
                run_id, problem, _stopped(store, untouched, old.record, moving, "repair the run")
            )
        rewritten += 1
    store._put_meta(META_KEY, new.record, expected=moving)
    return RekeyReport(old.record, new.record, rewritten, done)


def _stopped(store: EventStore, untouched: bool, old: str, moving: str, fix: str) -> str:
    """Where a re-key that stops leaves the store: as it was, if no run was rewritten yet
    (its record is put back), else half re-keyed."""
    if untouched:
        store._put_meta(META_KEY, old, expected=moving)
        return "nothing was re-keyed: the store is as it was"
    return (
        f"the store stays half re-keyed, and no handle may use it: {fix}, then run the "
        "re-key again with the same keys"
    )


def _run_ids(store: EventStore) -> Iterator[str]:
    after: str | None = None
    while page := store._list_runs(None, _PAGE, after):
        for info in page:
            yield info.run_id
        after = page[-1].run_id


def _under(store: EventStore, run_id: str, integrity: Integrity) -> bool:
    """Whether the run's first link is under `integrity` (a rewritten run's is)."""
    rows = store._read_rows(run_id, 0)
    try:
        first = next(rows, None)
    finally:
        close_iterator(rows)
    return first is not None and first.sequence == 1 and _link(integrity, "", first) == first.hash


#: Where a run's chain does not check out: (sequence, what is wrong there).
Problem = tuple[int, str]


def _relink(
    store: EventStore, run_id: str, old: Integrity, new: Integrity
) -> tuple[list[tuple[int, str]], Problem | None]:
    """The run's links under `new`, checking every stored one under `old` as it goes: the
    new hashes by sequence, and the first row that does not check out (None: every one)."""
    hashes: list[tuple[int, str]] = []
    previous, relinked = GENESIS_HASH, GENESIS_HASH
    rows = store._read_rows(run_id, 0)
    try:
        for expected, row in enumerate(rows, start=1):
            if row.sequence != expected:
                return hashes, (expected, f"the log has no event at sequence {expected}")
            if _link(old, previous, row) != row.hash:
                return hashes, (row.sequence, BAD_LINK)
            previous = row.hash
            relinked = _link(new, relinked, row)
            hashes.append((row.sequence, relinked))
    finally:
        close_iterator(rows)
    return hashes, None


def _rewrite(
    store: EventStore, run_id: str, old: Integrity, new: Integrity, moving: str
) -> Problem | None:
    """Rewrite one run under `new` in one transaction; what stops it, if anything.

    Raises:
        IntegrityKeyError: the store's key record moved away from `moving` meanwhile.
        ConcurrencyConflictError: the run's version kept moving.
    """
    expected = 0
    for _ in range(REKEY_TRIES):
        info = store._read_run(run_id)
        if info is None:
            return None  # gone since it was listed: nothing left to rewrite
        expected = info.version
        hashes, problem = _relink(store, run_id, old, new)
        if problem is not None:
            return problem
        snapshot = _resealed(store, run_id, old, new, dict(hashes))
        if store._rewrite_run(run_id, expected, hashes, snapshot, moving):
            anchor = store.options.anchor
            if anchor is not None and hashes:
                version, head = hashes[-1]
                anchor.put([AnchoredHead(run_id, version, head, new.record)])
            return None
        found = store._read_meta(META_KEY)
        if found != moving:
            raise IntegrityKeyError(
                f"the store's key record became {found!r} while it was re-keyed (another "
                "re-key, or an edit): look at the store before running the re-key again",
                store_key=found,
                handle_key=old.record,
            )
    # Appends are refused by the key record: only a writer that skips it (an older
    # agentfsm, a hand-made insert) moves a run now.
    actual = store._read_run(run_id)
    raise ConcurrencyConflictError(
        run_id=run_id, expected_version=expected, actual_version=actual.version if actual else 0
    )


def _resealed(
    store: EventStore, run_id: str, old: Integrity, new: Integrity, hashes: dict[int, str]
) -> StoredSnapshot | None:
    """The run's snapshot sealed under `new`, if it was sealed under `old` and covers an event
    of the log; None (the snapshot is dropped) otherwise: resealing a snapshot nobody with the
    key sealed would make it trusted."""
    stored = store._read_snapshot(run_id)
    if stored is None or stored.sequence not in hashes:
        return None
    rows = store._read_rows(run_id, stored.sequence - 1)
    try:
        row = next(rows, None)
    finally:
        close_iterator(rows)
    if distrust(run_id, stored, row, old) is not None:
        return None
    at = hashes[stored.sequence]
    return StoredSnapshot(stored.sequence, at, stored.data, new.seal(at, stored.data))


def _link(integrity: Integrity, previous: str, row: StoredEvent) -> str:
    try:
        return integrity.link(previous, canonical_text(row.data))
    except (ValueError, TypeError, RecursionError):
        return ""  # a line that is not JSON has no link: it never matches a stored hash


def _refused(run_id: str, problem: Problem, state: str) -> CorruptLogError:
    sequence, what = problem
    return CorruptLogError(f"{what}; {state}", run_id=run_id, sequence=sequence)


def _other(found: str | None, old: Integrity) -> IntegrityKeyError:
    """The refusal of a store whose record is not this re-key's to move."""
    keys = rekeying_keys(found)
    if keys is None:
        refused = key_refusal(found, old)
        assert refused is not None  # the record changed since the store opened
        return refused
    return IntegrityKeyError(
        f"the store is being re-keyed from {describe(keys[0])} to {describe(keys[1])}, not "
        f"from {describe(old.record)}: run the re-key with those keys",
        store_key=found,
        handle_key=old.record,
    )
