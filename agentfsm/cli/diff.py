"""`agentfsm diff`: where two runs of a store part, and how their records differ at the end.

`diverges_at` is the first sequence whose events differ once run ids and times are set aside
(a fork parts from its source right after the events it copied). The text lists, per run,
the events from there (at most `--limit`), then each record field whose final value differs;
`--json` prints `{"diverges_at", "fields", "a", "b"}` (see `agentfsm.reducers.diff`). Exit 0
either way: a difference is the answer, not a failure.
"""

from __future__ import annotations

import argparse

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError
from agentfsm.cli._output import print_json, shown, shown_json
from agentfsm.cli._store import add_store_argument, opened_run_store
from agentfsm.cli.control import command
from agentfsm.errors import LifecycleError, RunNotFoundError
from agentfsm.events.codec import event_to_dict
from agentfsm.reducers.diff import RunDiff, RunSide, diff_runs

__all__ = ["add_parser"]

#: The envelope an event's line shows as its sequence and type, or leaves out.
_ENVELOPE = frozenset({"run_id", "sequence", "type", "occurred_at"})
#: The widest a field's value is printed in the text output (the JSON holds it whole).
_WIDTH = 100


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm diff`."""
    p = command(
        subparsers, "diff", "show where two runs part and how their records differ",
        "agentfsm diff r-7 r-7b --store runs.db --json",
    )  # fmt: skip
    p.add_argument("run_a", type=_args.run_id, metavar="RUN_A")
    p.add_argument("run_b", type=_args.run_id, metavar="RUN_B")
    add_store_argument(p)
    p.add_argument("--json", action="store_true", help="print the difference as JSON")
    p.add_argument(
        "--limit", type=_count, default=200, metavar="N",
        help="show at most N events of each run from where they part (default 200)",
    )  # fmt: skip
    p.set_defaults(handler=_diff)


def _count(value: str) -> int:
    try:
        found = int(value)
    except ValueError:
        found = -1
    if found < 0:
        raise argparse.ArgumentTypeError(f"want a whole number from 0, got '{shown(value)}'")
    return found


def _diff(args: argparse.Namespace) -> int:
    with opened_run_store(args.store, "diff", args.run_a, args.table) as store:
        try:
            found = diff_runs(
                store.events(args.run_a), store.events(args.run_b),
                reducer=store.reducer, limit=args.limit,
            )  # fmt: skip
        except RunNotFoundError as exc:
            raise UsageError(f"{PROG} diff: {exc}") from None
        except LifecycleError as exc:
            raise UsageError(
                f"{PROG} diff: the runs cannot be folded with one table: {shown(str(exc))}"
            ) from None
    if args.json:
        print_json(found.to_json, "diff")
    else:
        _print(found)
    return 0


def _print(found: RunDiff) -> None:
    a, b = shown(found.a.run_id), shown(found.b.run_id)
    if found.diverges_at is None:
        print(f"runs {a} and {b} hold the same events")
    else:
        print(f"runs {a} and {b} part at sequence {found.diverges_at}")
        for side in (found.a, found.b):
            _print_side(side)
    if not found.differences:
        print("their records agree")
        return
    print("record fields that differ:")
    for name, (mine, theirs) in found.differences.items():
        print(f"  {shown(name)}: {_short(mine)} | {_short(theirs)}")


def _print_side(side: RunSide) -> None:
    print(f"  {shown(side.run_id)}:")
    if not side.events:
        print("    (no more events)")
    for event in side.events:
        data = event_to_dict(event)
        fields = {k: v for k, v in data.items() if k not in _ENVELOPE}
        print(f"    {event.sequence} {event.type} {_short(fields) if fields else ''}".rstrip())
    if side.more:
        print(f"    ... and {side.more} more")


def _short(value: object) -> str:
    text = shown_json(value)
    return text if len(text) <= _WIDTH else text[: _WIDTH - 3] + "..."
