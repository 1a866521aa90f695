"""Checks and errors every backend words the same way: arguments, lost races, drift.

Each is a plain function, so the sync template, the async PostgreSQL store and a
third-party backend refuse the same inputs with the same sentences.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from agentfsm.errors import (
    ConcurrencyConflictError,
    InvalidRunIdError,
    StoreInconsistentError,
)
from agentfsm.events.models import Event
from agentfsm.stores.runs import RUN_ORDERS, RunInfo

__all__ = [
    "check_append_args",
    "check_attachment",
    "check_attachment_name",
    "check_attachment_version",
    "check_order",
    "check_prefix",
    "check_run_id",
    "conflict",
    "inconsistency",
    "no_attachments",
    "no_leases",
    "statuses",
    "unplaced_cursor",
]


_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_prefix(prefix: str) -> str:
    """A table-name prefix, refused unless it is a plain identifier (it is spliced into SQL)."""
    if not _PREFIX.match(prefix):
        raise ValueError(f"table_prefix must be a plain SQL identifier, got {prefix!r}")
    return prefix


def check_run_id(run_id: object) -> None:
    """Refuse a run id no backend can hold, with the same error on every backend.

    Raises:
        InvalidRunIdError: not a str, empty, with a NUL (PostgreSQL text cannot hold one) or
            a lone surrogate (not UTF-8).
    """
    if not isinstance(run_id, str):
        raise InvalidRunIdError(run_id, f"it is a {type(run_id).__name__}, not a str")
    if not run_id:
        raise InvalidRunIdError(run_id, "it is empty")
    if "\x00" in run_id:
        raise InvalidRunIdError(run_id, "it holds a NUL character")
    if not run_id.isascii():
        try:
            run_id.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidRunIdError(run_id, "it is not valid Unicode (a lone surrogate)") from None


def check_attachment_name(run_id: str, name: object) -> None:
    """Refuse an attachment name that is not a non-empty str.

    Raises:
        TypeError: `name` is not a str.
        ValueError: `name` is empty.
    """
    if not isinstance(name, str):
        raise TypeError(
            f"run '{run_id}': an attachment name must be a str, got {type(name).__name__}"
        )
    if not name:
        raise ValueError(f"run '{run_id}': an attachment name must not be empty")


def check_attachment(run_id: str, name: object, data: object, version: object) -> None:
    """Refuse `put_attachment` arguments of the wrong kind, before anything is read.

    Raises:
        TypeError: `name` is not a str, `data` not bytes, or `version` not an int.
        ValueError: `name` is empty or `version` is below 1 (a stored run has an event).
    """
    check_attachment_name(run_id, name)
    if not isinstance(data, bytes):
        raise TypeError(
            f"run '{run_id}': attachment '{name}' must be bytes, got {type(data).__name__}"
        )
    if not isinstance(version, int) or isinstance(version, bool):
        raise TypeError(
            f"run '{run_id}': attachment '{name}' version must be an int, "
            f"got {type(version).__name__}"
        )
    if version < 1:
        raise ValueError(
            f"run '{run_id}': attachment '{name}' version must be at least 1, got {version}"
        )


def check_attachment_version(info: RunInfo, name: str, version: int) -> None:
    """Refuse an attachment stamped with a version the run has not reached.

    Raises:
        ValueError: `version` is above `info.version`.
    """
    if version > info.version:
        raise ValueError(
            f"run '{info.run_id}' is at version {info.version}: attachment '{name}' cannot "
            f"belong to version {version}, which the run has not reached"
        )


def inconsistency(
    run_id: str, before: RunInfo | None, found: Sequence[int], after: RunInfo | None
) -> StoreInconsistentError | None:
    """Whether the runs row and the log disagree, from where they must meet.

    `found` is the sequences of the (at most two) log rows from the runs row's version on,
    read between `before` and `after`, two reads of the runs row. A runs row at version v
    must find the row at v and nothing after it; a run without a runs row, no rows. A runs
    row that moved between the reads is a race, not damage.
    """
    version = before.version if before is not None else 0
    if tuple(found) == ((version,) if version else ()) or after != before:
        return None
    return StoreInconsistentError(run_id=run_id, runs_version=version, log_at=tuple(found))


def conflict(run_id: str, expected_version: int, actual_version: int) -> ConcurrencyConflictError:
    """The error for a lost race (a small helper so every backend words it the same)."""
    return ConcurrencyConflictError(
        run_id=run_id, expected_version=expected_version, actual_version=actual_version
    )


def check_append_args(events: Sequence[Event], expected_version: int) -> None:
    """Refuse an empty batch or a negative version, before anything is read."""
    if not events:
        raise ValueError("append needs at least one event")
    if expected_version < 0:
        raise ValueError(f"expected_version must not be negative, got {expected_version}")


def check_order(order: object) -> None:
    """Refuse an order `runs()` does not list in, naming those it does."""
    if order not in RUN_ORDERS:
        raise ValueError(
            f"order must be one of {', '.join(repr(o) for o in RUN_ORDERS)}, got {order!r}"
        )


def unplaced_cursor(after: str, order: str) -> ValueError:
    """The error of a page cursor that names no run, in an order that places it by its run."""
    return ValueError(
        f"after={after!r} names no run in the store: listing {order!r}, a page starts after "
        "a stored run (the last run id of the page before)"
    )


def statuses(status: str | Iterable[str] | None) -> tuple[str, ...] | None:
    """`runs(status=...)` as a backend reads it: None, or sorted distinct statuses."""
    if status is None:
        return None
    if isinstance(status, str):
        return (status,)
    return tuple(sorted(set(status)))


def no_attachments(store: object) -> NotImplementedError:
    """The error of a store whose backend keeps no attachments."""
    return NotImplementedError(
        f"{type(store).__name__} keeps no attachments: its backend does not implement "
        "`_write_attachment`, `_read_attachment` and `_delete_attachment`"
    )


def no_leases(store: object) -> NotImplementedError:
    """The error of a store whose backend keeps no leases (its runs' drivers go unleased)."""
    return NotImplementedError(
        f"{type(store).__name__} keeps no leases: its backend does not implement `_lease_rows`"
    )
