"""`agentfsm verify`: check every run of a store, row by row, and (with an anchor) its length.

Each run is checked as `EventStore.verify` checks it: every stored row in place, every link
of the hash chain (under the store's key, if it has one), the lifecycle, the runs row and
the snapshot. Runs are listed a page at a time and checked one after another, so a store of
any size is verified in the memory one run takes.

With `--anchor FILE` (or `AGENTFSM_ANCHOR`) each run is also compared with the head the file
keeps for it (a `FileAnchor`: the store's own anchor, or one `verify` alone writes): a log
shorter than its anchored head, a run the store no longer has, or an anchored event that is
not there any more is a finding. The heads of the runs found intact are then written to the
file, so the first run of `verify --anchor` writes it and every later one compares. Keep the
file where whoever can write the store cannot.

Exit status: 0 nothing found; 1 findings (each printed as it is found); 2 the command could
not check (no store, an unknown `--run-id`, a store under another key, a driver failing).

`--format json` (or `--json`) prints one JSON object, written as the runs are checked:
`{"anchor": FILE or null, "findings": [...], "events": N, "ok": BOOL, "recorded": N,
"runs": N}`, each finding `{"run_id", "sequence", "problem", "checked", "head_hash"}`
(`sequence` null for a runs row whose status or time is wrong; `checked` the events found
right from sequence 1, `head_hash` the chain hash of the last of them); `runs` counts the
runs checked (the anchored runs the store lacks included), `events` the events found right,
`recorded` the heads written to the anchor.
"""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, load_tables
from agentfsm.cli._output import shown, shown_json
from agentfsm.cli._store import (
    ENV,
    PAGE,
    add_store_argument,
    opened_store,
    run_ids,
    run_tables,
)
from agentfsm.cli.control import command
from agentfsm.errors import RunNotFoundError, UnknownTableError
from agentfsm.fsm.registry import known_tables, lookup
from agentfsm.fsm.table import TransitionTable
from agentfsm.stores.anchor import Anchor, AnchoredHead, FileAnchor, anchor_problem
from agentfsm.stores.base import EventStore
from agentfsm.stores.rows import VerifyReport

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm verify`."""
    p = command(
        subparsers, "verify", "check every run of a store: each row, link, snapshot, and "
        "(with --anchor) that no run got shorter",
        "agentfsm verify --store runs.db --anchor /mnt/elsewhere/heads.db",
    )  # fmt: skip
    add_store_argument(p)
    p.add_argument("--run-id", type=_args.run_id, help="only this run")
    p.add_argument(
        "--anchor", type=_args.path, metavar="FILE",
        help="compare each run with the head FILE keeps, then keep the heads of the runs "
        "found intact there (created if missing; default: $AGENTFSM_ANCHOR)",
    )  # fmt: skip
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    p.add_argument(
        "--json", action="store_const", const="json", dest="format", help="--format json"
    )
    p.set_defaults(handler=_verify)


def _verify(args: argparse.Namespace) -> int:
    # `--table` once per version (or a list): a run is checked with the one it is under.
    versions = load_tables(args.table, "verify")
    table = versions[0] if versions else None
    if args.anchor is not None and _same_file(args.anchor, args.store):
        raise UsageError(
            f"{PROG} verify: --anchor must be another file than the store: an anchor is "
            "kept where whoever can write the store cannot"
        )
    given = FileAnchor(args.anchor) if args.anchor is not None else None
    out = _Json(sys.stdout) if args.format == "json" else _Text(sys.stdout)
    tally = _Tally()
    try:
        with (
            opened_store(
                args.store, "verify", table, [*versions, *known_tables()], anchor=given
            ) as store,
            _Handles(store, args, given, versions) as handles,
        ):
            anchor = store.options.anchor
            gone = _lost(store, anchor, args.run_id)  # before any output: a usage error
            out.start(anchor)
            if gone is not None:
                _gone(gone, store, out, tally)
            else:
                _check_runs(store, handles, anchor, args.run_id, out, tally)
                if isinstance(anchor, FileAnchor) and args.run_id is None:
                    _check_gone(store, anchor, out, tally)
    finally:
        if given is not None:
            given.close()
    out.end(tally)
    return 0 if tally.findings == 0 else 1


def _same_file(anchor: Path, spec: str | None) -> bool:
    spec = spec or os.environ.get(ENV) or ""
    store = Path(spec.removeprefix("sqlite:///").removeprefix("sqlite:"))
    try:
        return anchor.resolve() == store.resolve()
    except OSError:
        return False


def _lost(store: EventStore, anchor: Anchor | None, run_id: str | None) -> AnchoredHead | None:
    """The anchored head of `run_id` when the store lost the run (a finding), or None.

    Raises:
        UsageError: neither the store nor its anchor knows `run_id`.
    """
    if run_id is None:
        return None
    try:
        store.run_info(run_id)
    except RunNotFoundError as exc:
        anchored = anchor.get(run_id) if anchor is not None else None
        if anchored is None:
            raise UsageError(f"{PROG} verify: {exc}") from None
        return anchored
    return None


class _Tally:
    """What a verification has counted so far."""

    def __init__(self) -> None:
        self.runs = 0
        self.events = 0
        self.findings = 0
        self.recorded = 0


def _check_runs(
    store: EventStore,
    handles: _Handles,
    anchor: Anchor | None,
    run_id: str | None,
    out: _Text | _Json,
    tally: _Tally,
) -> None:
    key = store.options.integrity.record
    heads: list[AnchoredHead] = []
    for one in run_ids(store, run_id):
        report = handles.verify(one)
        tally.runs += 1
        tally.events += report.checked
        if not report.ok:
            tally.findings += 1
            out.finding(report)
        elif anchor is not None:
            heads.append(AnchoredHead(one, report.checked, report.head_hash, key))
            if len(heads) >= PAGE:
                anchor.put(heads)
                tally.recorded += len(heads)
                heads.clear()
    if anchor is not None and heads:
        anchor.put(heads)
        tally.recorded += len(heads)


def _check_gone(store: EventStore, anchor: FileAnchor, out: _Text | _Json, tally: _Tally) -> None:
    """Report the runs the anchor keeps a head of and the store no longer has."""
    after: str | None = None
    while page := anchor.heads(after=after, limit=PAGE):
        for anchored in page:
            try:
                store.run_info(anchored.run_id)
            except RunNotFoundError:
                _gone(anchored, store, out, tally)
        after = page[-1].run_id


def _gone(anchored: AnchoredHead, store: EventStore, out: _Text | _Json, tally: _Tally) -> None:
    found = anchor_problem(anchored, 0, None, store.options.integrity.record)
    assert found is not None  # an anchored run at version 0 is always one
    tally.runs += 1
    tally.findings += 1
    out.finding(VerifyReport(anchored.run_id, False, 0, "", *found))


class _Handles:
    """A handle per table the store's runs are under, so each run is checked with its own:
    the store's (the default table, or the first `--table`) first, and for a run that does
    not pass, the table its log names (among the versions `--table` gives, else the
    registered ones), when that is another."""

    def __init__(
        self,
        store: EventStore,
        args: argparse.Namespace,
        anchor: Anchor | None,
        versions: tuple[TransitionTable, ...] = (),
    ):
        self._store = store
        self._args = args
        self._anchor = anchor
        self._versions = versions
        self._opened: dict[str, EventStore] = {}
        self._stack = ExitStack()

    def __enter__(self) -> _Handles:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def verify(self, run_id: str) -> VerifyReport:
        report = self._store.verify(run_id)
        if report.ok:
            return report
        table = self._table_of(run_id)
        if table is None:
            return report
        return self._handle(table).verify(run_id)

    def _table_of(self, run_id: str) -> TransitionTable | None:
        _, current = run_tables(self._store, run_id)
        if current is None or current.digest == self._store.reducer.table.digest:
            return None
        for table in self._versions:
            if table.digest == current.digest:
                return table
        try:
            return lookup(current)
        except UnknownTableError:
            return None  # the store's report says the run is under a table not known here

    def _handle(self, table: TransitionTable) -> EventStore:
        handle = self._opened.get(table.digest)
        if handle is None:
            handle = self._stack.enter_context(
                opened_store(
                    self._args.store,
                    "verify",
                    table,
                    [*self._versions, *known_tables()],
                    anchor=self._anchor,
                )
            )
            self._opened[table.digest] = handle
        return handle


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


class _Text:
    """Findings as they come, one line each, then a summary."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._anchor: Anchor | None = None

    def start(self, anchor: Anchor | None) -> None:
        self._anchor = anchor

    def finding(self, report: VerifyReport) -> None:
        print(shown(str(report)), file=self._stream, flush=True)

    def end(self, tally: _Tally) -> None:
        if tally.findings == 0:
            summary = (
                f"ok: {_plural(tally.runs, 'run')}, {_plural(tally.events, 'event')}, "
                "every hash chain intact"
            )
        else:
            verb = "has" if tally.findings == 1 else "have"
            summary = f"{tally.findings:,} of {_plural(tally.runs, 'run')} {verb} findings"
        print(summary, file=self._stream)
        if self._anchor is not None:
            print(
                f"anchor {_label(self._anchor)}: {_plural(tally.recorded, 'run')} recorded",
                file=self._stream,
            )


class _Json:
    """One JSON object, written as the runs are checked (findings first, counts last), so
    its size does not make the command hold every finding."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._first = True

    def start(self, anchor: Anchor | None) -> None:
        where = shown_json(_path(anchor))
        self._stream.write(f'{{"anchor": {where}, "findings": [')

    def finding(self, report: VerifyReport) -> None:
        item = {
            "run_id": report.run_id,
            "sequence": report.sequence,
            "problem": report.problem,
            "checked": report.checked,
            "head_hash": report.head_hash,
        }
        self._stream.write(("\n" if self._first else ",\n") + shown_json(item))
        self._first = False
        self._stream.flush()

    def end(self, tally: _Tally) -> None:
        ok = "true" if tally.findings == 0 else "false"
        self._stream.write(
            f'{"" if self._first else chr(10)}], "events": {tally.events}, "ok": {ok}, '
            f'"recorded": {tally.recorded}, "runs": {tally.runs}}}\n'
        )


def _path(anchor: Anchor | None) -> str | None:
    if anchor is None:
        return None
    return anchor.path if isinstance(anchor, FileAnchor) else repr(anchor)


def _label(anchor: Anchor) -> str:
    return shown(f"'{_path(anchor)}'")
