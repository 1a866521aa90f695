"""How a store seals its rows: the hash chain's links and the snapshots' digests.

Without a key, a link is `sha256(previous + canonical event)` and a snapshot's digest is
`sha256(event hash + snapshot text)`: anyone can recompute both, so they catch an edit by
someone who did not (a hand-edited row, a torn write, a forged snapshot that kept its old
digest) but not a rewrite by someone who recomputed the chain. With a secret key they are
HMAC-SHA256 under it, and a store edited by anyone without the key fails its checks even
when every hash was recomputed. docs/stores.md has the threat model.

A store records which key it is under (`Integrity.record`: `unkeyed`, or the key's id,
never the key), so a handle with another key is refused before it writes a link no other
handle can check (`_keys.py`).
"""

from __future__ import annotations

import hashlib
import hmac
import os

import attrs

__all__ = [
    "KEY_ENV",
    "MIN_KEY_BYTES",
    "PLAIN",
    "UNKEYED",
    "Integrity",
    "chain_hash",
    "key_from_env",
    "key_id",
]

#: The environment variable a store's integrity key is read from when none is given.
KEY_ENV = "AGENTFSM_INTEGRITY_KEY"
#: The shortest key accepted: HMAC-SHA256 with fewer than 128 bits of key is guessable.
MIN_KEY_BYTES = 16
#: The key record of a store whose links are plain SHA-256.
UNKEYED = "unkeyed"
#: What a key id is the HMAC of: a fixed label, so the id names the key without being a
#: plain hash of it (a short key's plain hash could be searched for; its HMAC cannot).
_KEY_ID_LABEL = b"agentfsm integrity key id"


def key_id(key: bytes) -> str:
    """A key's public name: the first 16 hex digits of HMAC-SHA256(key, fixed label).

    Stored in a store's meta and shown in messages, so a person can tell which key a store
    expects; 64 bits name a key among any a deployment will have, and say nothing of it.
    """
    return hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16]


def chain_hash(previous: str, canonical: str) -> str:
    """The unkeyed hash of one stored event: hex sha256 of the previous hash + its JSON.

    The JSON is canonical (`agentfsm.events.canonical_json` of the event as a dict), so it
    does not depend on how the line was spelled: anyone can recompute the chain from an
    export.
    """
    return hashlib.sha256((previous + canonical).encode()).hexdigest()


def key_from_env() -> bytes | None:
    """The key in `AGENTFSM_INTEGRITY_KEY` (UTF-8), or None when it is unset or empty."""
    value = os.environ.get(KEY_ENV)
    return value.encode() if value else None


def _check_key(_: object, __: object, key: bytes | None) -> None:
    if key is None:
        return
    if not isinstance(key, bytes):
        raise TypeError(f"an integrity key must be bytes, got {type(key).__name__}")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(
            f"an integrity key must be at least {MIN_KEY_BYTES} bytes, got {len(key)} "
            f"(set {KEY_ENV} or StoreOptions(integrity_key=...) to a longer secret)"
        )


@attrs.frozen(repr=False)
class Integrity:
    """The hash function of a store's chain and snapshot digests: keyed or not.

    Attributes:
        key: the secret; None for plain SHA-256 (never shown in a repr).
        record: what a store under this integrity records in its meta: `unkeyed`, or
            `hmac-sha256:` and the key's id (`key_id`).
    """

    key: bytes | None = attrs.field(default=None, validator=_check_key)
    record: str = attrs.field(init=False)

    @record.default
    def _record(self) -> str:
        return UNKEYED if self.key is None else f"hmac-sha256:{key_id(self.key)}"

    @property
    def keyed(self) -> bool:
        """Whether links and digests are HMACs under a secret key."""
        return self.key is not None

    def link(self, previous: str, canonical: str) -> str:
        """The chain hash of an event after `previous`, given its canonical JSON."""
        if self.key is None:
            return chain_hash(previous, canonical)
        return hmac.new(self.key, (previous + canonical).encode(), hashlib.sha256).hexdigest()

    def seal(self, event_hash: str, data: str) -> str:
        """The digest of a snapshot's text, bound to the chain hash of the event it covers."""
        message = f"snapshot\n{event_hash}\n{data}".encode()
        if self.key is None:
            return "sha256:" + hashlib.sha256(message).hexdigest()
        return "hmac-sha256:" + hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def __repr__(self) -> str:
        return f"Integrity(keyed={self.keyed})"


#: Unkeyed integrity: plain SHA-256 links and digests.
PLAIN = Integrity()
