"""The table a log's runs were started under, read from the log itself.

Each run records its table on `run.started` (`TransitionTable.ref`), and a `run.migrated`
moves it to another. A log-reading command without `--table` looks ahead to the log's first
`run.started` that names a table, then on (within the look-ahead) for that run's
`run.migrated` lines, and folds the log with the table the run ends under, found by digest
among the known tables (`agentfsm.fsm.registry`), as the steering commands do for a run in
a store (the versions before a migration are found there too, when the fold needs them).
The lines read ahead are handed back in front of the rest, so a pipe is read once and whole.

With several `--table` (versions of one lifecycle), the table is the one of those the log's
first run ends under, the same look-ahead choosing it.

One table per log: a later run started under another table is refused in the fold, and
that refusal names both tables (`TableMismatchError`); such a log is read with `--run-id`
and `--table`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence

from pydantic import ValidationError

from agentfsm.cli._common import registered_table, table_among
from agentfsm.cli._output import shown
from agentfsm.events.models import TableRef
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable

__all__ = ["table_of_log"]

# A log opens with a run.started; a log that does not within this many lines (or bytes) is
# folded with the default table (its own lines then say what is wrong), and memory stays
# bounded: a thousand lines of a few MiB each would be GiB.
_LOOK_AHEAD = 1000
_LOOK_AHEAD_BYTES = 4 * 2**20
# A run.started line is small; a longer line is not parsed twice just to look.
_LONGEST_LOOKED_AT = 64 * 1024


def table_of_log(
    lines: Iterator[str],
    command: str,
    given: Sequence[TransitionTable] = (),
    run_id: str | None = None,
    assumed: list[bool] | None = None,
) -> tuple[TransitionTable, Iterator[str]]:
    """The table the log's first run (or run `run_id`) ends under (its `run.started`, or its
    latest `run.migrated` within the look-ahead), among `given` when given, and the log's
    lines, none lost.

    `assumed`, when given, is told (appended to) whether the default table was assumed for
    a log with no `run.started` at all within the look-ahead: a run may end straight from
    `created`, so such a log (a kit's counterexample among them) names no table and may be of
    any lifecycle, and the command should say which table checked it.

    Raises:
        UsageError: that table is not known (not among `given`) (exit 2), naming the run,
            the line and the table.
    """
    ahead: list[str] = []
    held = 0
    found: tuple[str, TableRef, int] | None = None  # the run, its latest table, that line
    started = False  # any run.started in the look-ahead, naming a table or not
    for number, raw in enumerate(lines, start=1):
        ahead.append(raw)
        held += len(raw)
        started = started or '"run.started"' in raw
        if found is None:
            named = _names_table(raw, "run.started", "table")
            if named is not None and run_id in (None, named[0]):
                found = (*named, number)
        else:
            moved = _names_table(raw, "run.migrated", "to_table")
            if moved is not None and moved[0] == found[0]:
                found = (*moved, number)
        if number >= _LOOK_AHEAD or held >= _LOOK_AHEAD_BYTES:
            break
    table = given[0] if given else DEFAULT_TABLE
    if assumed is not None:
        # Only for a log with events in it: an empty one, or one of no event at all, is
        # reported for what it is.
        events = any('"type"' in raw for raw in ahead)
        assumed.append(not given and not started and events)
    if found is not None:
        run_id, ref, number = found
        where = f"run '{shown(run_id)}' (line {number})"
        if given:
            table = table_among(ref, given, command, where)
        elif ref.digest != DEFAULT_TABLE.digest:
            table = registered_table(ref, command, where)
    return table, itertools.chain(ahead, lines)


def _names_table(raw: str, event_type: str, field: str) -> tuple[str, TableRef] | None:
    """The run id and table of a `run.started` (or `run.migrated`) line that names one
    (in `field`); None for any other line (a line that is not an event is left for the
    fold to report)."""
    if len(raw) > _LONGEST_LOOKED_AT or f'"{event_type}"' not in raw:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("type") != event_type:
        return None
    run_id, table = value.get("run_id"), value.get(field)
    if not isinstance(run_id, str) or not isinstance(table, dict):
        return None
    try:
        return run_id, TableRef.model_validate(table)
    except ValidationError:
        return None
