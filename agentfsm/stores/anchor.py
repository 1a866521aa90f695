"""External anchors: each run's head kept outside the store, so a truncated log is noticed.

A hash chain proves every row a log holds, not that none was removed from its end: delete
the last rows of a run and move its runs row to match, and the chain that is left is
intact. A paid call whose `tool.requested` was removed that way would be made again by the
next drive. An anchor keeps each run's head (version and chain hash) somewhere the store's
attacker cannot write; a log shorter than its anchor, or no longer holding the anchored
event, is then refused by a load and reported by `verify`.

A store given one (`StoreOptions(anchor=...)`) gives it each run's head after every commit
(`Anchor.put`) and reads it back when it loads a run (`Anchor.get`). Any object with those
two methods is an anchor: a service on another machine, a write-once bucket. `FileAnchor`
is the one shipped: a small SQLite file, one row per run, so a commit costs one keyed
upsert whatever the number of runs (the file never grows with commits, only with runs).
`agentfsm verify --anchor FILE` writes and compares the same file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from agentfsm.errors import AnchorError, CorruptLogError, TruncatedLogError

__all__ = ["Anchor", "AnchoredHead", "FileAnchor"]

#: The environment variable a store's anchor file is read from when none is given.
ANCHOR_ENV = "AGENTFSM_ANCHOR"


@attrs.frozen(slots=True)
class AnchoredHead:
    """Where a run's log ended when its anchor was last told.

    Attributes:
        run_id: the run.
        version: its last sequence then.
        head_hash: the chain hash of that event.
        key: the store's key record then (`unkeyed` or `hmac-sha256:<key id>`): a store
            re-keyed since has other hashes, so only the version is compared.
    """

    run_id: str
    version: int
    head_hash: str
    key: str


@runtime_checkable
class Anchor(Protocol):
    """Where a store keeps each run's head, outside the store.

    `put` must never move a run's head back: a head with a lower version than the one
    kept is ignored (two processes' puts may arrive out of order), one with the same or a
    higher version replaces it (a re-key changes the hash at the same version).
    """

    def put(self, heads: Sequence[AnchoredHead]) -> None:
        """Keep these heads (one per run), each replacing its run's unless that is further on.

        Raises:
            AnchorError: they could not be kept.
        """

    def get(self, run_id: str) -> AnchoredHead | None:
        """The head kept for `run_id`, or None.

        Raises:
            AnchorError: the anchor could not be read.
        """


def anchor_problem(
    anchored: AnchoredHead, version: int, head_hash: str | None, key: str
) -> tuple[int, str] | None:
    """What is wrong with a run whose log ends at `version` given its anchored head, as
    (the first wrong sequence, a sentence), or None.

    Args:
        anchored: the head the anchor keeps.
        version: where the stored log ends (0: the store has no such run).
        head_hash: the stored chain hash at `anchored.version` (None when the log is
            shorter than that).
        key: the store's key record now.
    """
    if version < anchored.version:
        if version == 0:
            return 1, (
                f"the store has no such run, but the anchor records version "
                f"{anchored.version}: it was removed from the store"
            )
        return version + 1, (
            f"the log ends at version {version}, but the anchor records version "
            f"{anchored.version}: events were removed from the store"
        )
    if anchored.key == key and head_hash != anchored.head_hash:
        return anchored.version, (
            f"the event at sequence {anchored.version} is not the one the anchor records: "
            "the log was rewritten"
        )
    return None


def anchor_error(
    anchored: AnchoredHead, version: int, head_hash: str | None, key: str
) -> CorruptLogError | None:
    """What a load raises for a run whose log ends at `version` (see `anchor_problem`):
    `TruncatedLogError` for a log shorter than its anchor (or gone), `CorruptLogError` for
    one that no longer holds the anchored event; None when it is where the anchor says."""
    found = anchor_problem(anchored, version, head_hash, key)
    if found is None:
        return None
    sequence, problem = found
    run_id = anchored.run_id
    if version < anchored.version:
        return TruncatedLogError(
            problem,
            run_id=run_id,
            sequence=sequence,
            log_version=version,
            anchored_version=anchored.version,
        )
    return CorruptLogError(problem, run_id=run_id, sequence=sequence)


def anchor_not_told(run_id: str, version: int, exc: Exception) -> AnchorError:
    """The error of an append whose commit the anchor did not take (`exc`: what it raised)."""
    return AnchorError(
        f"run '{run_id}': version {version} is stored, but the anchor did not take its head "
        f"({_why(exc)}); drive the run on only once it does"
    )


def anchor_not_read(run_id: str, exc: Exception) -> AnchorError:
    """The error of a load whose anchor could not be read (`exc`: what it raised)."""
    return AnchorError(f"run '{run_id}': the anchor cannot be read ({_why(exc)})")


def _why(exc: Exception) -> str:
    # A user's anchor may raise anything; its own errors are named by their type.
    return str(exc) if isinstance(exc, AnchorError) else f"{type(exc).__name__}: {exc}"


class FileAnchor:
    """An `Anchor` in a SQLite file of its own: one row per run, upserted after each commit.

    The file holds one table, `agentfsm_anchor (run_id TEXT PRIMARY KEY, version INTEGER,
    head_hash TEXT, key TEXT)`: one row per run, whatever the number of commits, so it
    stays small and a put costs one keyed upsert (O(log runs)). Several processes may share
    it (WAL mode; a put waits for another's for up to 30 s). Keep it where whoever can
    write the store cannot: another disk, another machine, another account.

    Args:
        path: the file (created if missing).
        synchronous: `"FULL"` (fsync each put: an anchored head survives a power cut) or
            `"NORMAL"` (the last puts before a power cut may be lost, which makes the anchor
            lag, never lead).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, synchronous: Literal["FULL", "NORMAL"] = "FULL"
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be 'FULL' or 'NORMAL', got {synchronous!r}")
        self.path = os.fspath(path)
        self.synchronous = synchronous
        self._conn: sqlite3.Connection | None = None
        # One connection, used by whichever thread a store runs on (a threaded async store,
        # the async PostgreSQL store's worker thread): one call at a time.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"FileAnchor({self.path!r})"

    def __getstate__(self) -> dict[str, Any]:
        # A store factory that pickles (`race_appends`) takes the file, not the connection.
        return {"path": self.path, "synchronous": self.synchronous}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self.synchronous = state["synchronous"]
        self._conn = None
        self._lock = threading.Lock()

    def put(self, heads: Sequence[AnchoredHead]) -> None:
        """Keep these heads in one transaction (see `Anchor.put`)."""
        if not heads:
            return
        rows = [(h.run_id, h.version, h.head_hash, h.key) for h in heads]
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    conn.executemany(_PUT, rows)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._error("written", exc) from None

    def get(self, run_id: str) -> AnchoredHead | None:
        """The head kept for `run_id`, or None."""
        with self._lock:
            try:
                row = self._connection().execute(_GET, (run_id,)).fetchone()
            except sqlite3.Error as exc:
                raise self._error("read", exc) from None
        return None if row is None else AnchoredHead(run_id, *row)

    def heads(self, *, after: str | None = None, limit: int = 500) -> list[AnchoredHead]:
        """Up to `limit` kept heads ordered by run id, after run id `after` (for paging)."""
        with self._lock:
            try:
                rows = self._connection().execute(_PAGE, (after or "", limit)).fetchall()
            except sqlite3.Error as exc:
                raise self._error("read", exc) from None
        return [AnchoredHead(*row) for row in rows]

    def close(self) -> None:
        """Close the file (it is opened again on the next call)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                conn = sqlite3.connect(
                    self.path, timeout=30.0, isolation_level=None, check_same_thread=False
                )
            except sqlite3.Error as exc:
                raise self._error("opened", exc) from None
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute(f"PRAGMA synchronous={self.synchronous}")
                conn.execute(_SCHEMA)
            except sqlite3.Error as exc:
                conn.close()
                raise self._error("opened", exc) from None
            self._conn = conn
        return self._conn

    def _error(self, what: str, exc: sqlite3.Error) -> AnchorError:
        return AnchorError(f"the anchor file '{self.path}' cannot be {what}: {exc}")


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS agentfsm_anchor (run_id TEXT PRIMARY KEY, "
    "version INTEGER NOT NULL, head_hash TEXT NOT NULL, key TEXT NOT NULL) WITHOUT ROWID"
)
# A head never moves back: puts from two processes may land out of order.
_PUT = (
    "INSERT INTO agentfsm_anchor (run_id, version, head_hash, key) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (run_id) DO UPDATE SET version = excluded.version, "
    "head_hash = excluded.head_hash, key = excluded.key "
    "WHERE excluded.version >= agentfsm_anchor.version"
)
_GET = "SELECT version, head_hash, key FROM agentfsm_anchor WHERE run_id = ?"
_PAGE = (
    "SELECT run_id, version, head_hash, key FROM agentfsm_anchor WHERE run_id > ? "
    "ORDER BY run_id LIMIT ?"
)


def to_anchor(value: Anchor | str | os.PathLike[str] | None) -> Anchor | None:
    """`StoreOptions(anchor=...)` as given: an `Anchor`, or a path for a `FileAnchor`."""
    if value is None or isinstance(value, Anchor):
        return value
    if isinstance(value, str | os.PathLike):
        return FileAnchor(value)
    raise TypeError(
        f"an anchor is an object with put() and get(), or a file path; got {type(value).__name__}"
    )


def anchor_from_env() -> Anchor | None:
    """A `FileAnchor` on the file `AGENTFSM_ANCHOR` names, or None when it is unset or empty."""
    path = os.environ.get(ANCHOR_ENV)
    return FileAnchor(path) if path else None
