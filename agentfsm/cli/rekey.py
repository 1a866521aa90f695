"""`agentfsm rekey`: move a store to a new integrity key (or add one, or remove it).

The keys come from the environment, never from the command line (where `ps` shows them):
`AGENTFSM_INTEGRITY_KEY` is the store's key now (empty: the store is unkeyed, and a key is
added), `AGENTFSM_NEW_INTEGRITY_KEY` the key from now on (empty: the key is removed). Every
run's chain is checked under the old key before anything changes; then every link and
snapshot digest is rewritten, one transaction per run (`agentfsm.stores.rekey`). Meanwhile
the store refuses every handle, under either key; stop the processes that write to it first.
Killed, it is resumed by running it again with the same keys.

Exit status: 0 re-keyed; 1 a run's chain does not check out under the old key, or a run
kept changing while it was rewritten (a writer that does not check the key record): the
message says whether the store is as it was or stays half re-keyed; 2 no key change given,
a key too short, a store under other keys, or a store that fails.
"""

from __future__ import annotations

import argparse
import os
import sys

from agentfsm.cli._common import PROG, Parser, UsageError
from agentfsm.cli._output import error_text, shown
from agentfsm.cli._store import add_store_argument, opened_store
from agentfsm.cli.control import command
from agentfsm.errors import ConcurrencyConflictError, CorruptLogError
from agentfsm.stores._integrity import KEY_ENV, MIN_KEY_BYTES, key_from_env
from agentfsm.stores.rekey import rekey

__all__ = ["NEW_KEY_ENV", "add_parser"]

#: The environment variable the new key is read from.
NEW_KEY_ENV = "AGENTFSM_NEW_INTEGRITY_KEY"


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm rekey`."""
    p = command(
        subparsers, "rekey", f"rewrite a store's links under a new key (old key from {KEY_ENV}, "
        f"new from {NEW_KEY_ENV}; either may be empty)",
        f"{KEY_ENV}=$OLD {NEW_KEY_ENV}=$NEW agentfsm rekey --store runs.db",
    )  # fmt: skip
    add_store_argument(p, table=False)
    p.set_defaults(handler=_rekey)


def _rekey(args: argparse.Namespace) -> int:
    old = key_from_env()
    value = os.environ.get(NEW_KEY_ENV)
    new = value.encode() if value else None
    if old is None and new is None:
        raise UsageError(
            f"{PROG} rekey: nothing to do: set {NEW_KEY_ENV} to the new key (and {KEY_ENV} to "
            "the store's key, if it has one)"
        )
    if new is not None and len(new) < MIN_KEY_BYTES:
        raise UsageError(
            f"{PROG} rekey: {NEW_KEY_ENV} must be at least {MIN_KEY_BYTES} bytes, got {len(new)}"
        )
    with opened_store(args.store, "rekey") as store:
        try:
            report = rekey(store, new)
        except ValueError as exc:  # the new key is the store's
            raise UsageError(f"{PROG} rekey: {shown(str(exc))}") from None
        except (CorruptLogError, ConcurrencyConflictError) as exc:
            print(f"{PROG} rekey: refused: {error_text(exc)}", file=sys.stderr)
            for note in getattr(exc, "__notes__", ()):
                print(f"  {shown(note)}", file=sys.stderr)
            return 1
    print(report)
    return 0
