"""A store's key record: which integrity key its links are under, and who may use it.

A store records in its meta (under `integrity`) what its links are: `unkeyed`, or
`hmac-sha256:` and the key's id (`Integrity.record`; the id names the key, it never is
the key). A handle whose own record is another is refused when it opens, before it reads
or writes a run: a keyless handle would otherwise append links no keyed handle accepts (the
run is bricked), and a keyed one would judge every row of a keyless store as forged.
While `rekey` rewrites a store the record is `rekeying <from> -> <to>`, which is no handle's:
every handle is refused until the rewrite is done, since half the runs are under each key.

A store written before key records existed has none; the first handle to open it records
its own, after checking that the first run's first link is under that key, so a keyless
handle cannot adopt a keyed store (nor a keyed one a keyless store).
"""

from __future__ import annotations

from agentfsm.errors import IntegrityKeyError
from agentfsm.events._canonical import canonical_text
from agentfsm.stores._integrity import KEY_ENV, PLAIN, UNKEYED, Integrity
from agentfsm.stores.rows import GENESIS_HASH, StoredEvent

__all__ = [
    "META_KEY",
    "adoption_refusal",
    "describe",
    "is_rekeying",
    "key_refusal",
    "rekeying",
    "rekeying_keys",
]

#: The meta key a store's key record is kept under.
META_KEY = "integrity"

_PREFIX = "hmac-sha256:"
_REKEYING = "rekeying "
_ARROW = " -> "
_GIVE_KEY = f"give it the store's key ({KEY_ENV} or StoreOptions(integrity_key=...))"


def rekeying(old: str, new: str) -> str:
    """The record of a store being re-keyed from record `old` to record `new`."""
    return f"{_REKEYING}{old}{_ARROW}{new}"


def rekeying_keys(record: str | None) -> tuple[str, str] | None:
    """The (from, to) records of a store being re-keyed, or None for any other record."""
    if record is None or not record.startswith(_REKEYING):
        return None
    old, arrow, new = record.removeprefix(_REKEYING).partition(_ARROW)
    return (old, new) if arrow else None


def is_rekeying(record: str | None) -> bool:
    """Whether `record` is that of a store being re-keyed."""
    return rekeying_keys(record) is not None


def describe(record: str) -> str:
    """A key record as a message names it: `no key`, or `key id '<id>'`."""
    if record == UNKEYED:
        return "no key"
    return f"key id '{record.removeprefix(_PREFIX)}'"


def key_refusal(store_record: str | None, integrity: Integrity) -> IntegrityKeyError | None:
    """Why a handle under `integrity` may not use a store that records `store_record`, or
    None when it may (the records are the same)."""
    mine = integrity.record
    if store_record == mine:
        return None
    keys = rekeying_keys(store_record)
    if keys is not None:
        message = (
            f"the store is being re-keyed from {describe(keys[0])} to {describe(keys[1])}: "
            "no handle may use it until `agentfsm rekey` finishes (run it again with the "
            "same keys to resume it)"
        )
    elif store_record == UNKEYED:
        message = (
            f"the store is unkeyed, but this handle has a key ({describe(mine)}): open it "
            "without one, or add the key with `agentfsm rekey`"
        )
    elif store_record is not None and store_record.startswith(_PREFIX):
        theirs = describe(store_record)
        if integrity.keyed:
            message = (
                f"the store is keyed with {theirs}, but this handle's key has id "
                f"'{mine.removeprefix(_PREFIX)}': {_GIVE_KEY}"
            )
        else:
            message = f"the store is keyed with {theirs}, but this handle has no key: {_GIVE_KEY}"
    else:
        message = (
            f"the store's key record is {store_record!r}, which this agentfsm does not know: "
            "upgrade agentfsm"
        )
    return IntegrityKeyError(message, store_key=store_record, handle_key=mine)


def adoption_refusal(
    integrity: Integrity, run_id: str | None, first: StoredEvent | None
) -> IntegrityKeyError | None:
    """Why a handle under `integrity` may not record its key in a store that records none,
    judged by the first link of the store's first run (`first`, the row at sequence 1 of
    run `run_id`; None when the store holds no run, or the run no such row: then there is
    nothing the handle's key could contradict). None when it may."""
    if first is None or run_id is None:
        return None
    if _links(integrity, first):
        return None
    mine = integrity.record
    start = f"the store records no key yet, and its run '{run_id}'"
    if not integrity.keyed:
        message = (
            f"{start} was not written without one (it was written under a key, or changed): "
            f"{_GIVE_KEY}"
        )
    elif _links(PLAIN, first):
        message = (
            f"{start} was written without a key, but this handle has one ({describe(mine)}): "
            "open it without one, or add the key with `agentfsm rekey`"
        )
    else:
        message = f"{start} was not written under this handle's key ({describe(mine)}): {_GIVE_KEY}"
    return IntegrityKeyError(message, store_key=None, handle_key=mine)


def _links(integrity: Integrity, first: StoredEvent) -> bool:
    """Whether the run's first row carries its link under `integrity`."""
    try:
        return integrity.link(GENESIS_HASH, canonical_text(first.data)) == first.hash
    except (ValueError, TypeError, RecursionError):  # a line that is not JSON links nothing
        return False
