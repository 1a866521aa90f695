"""The table a log's runs were started under, read from the log itself.

Each run records its table on `run.started` (`TransitionTable.ref`). A log-reading command
without `--table` looks ahead to the log's first `run.started` that names a table and folds
the log with that table, found by digest among the known tables (`agentfsm.fsm.registry`),
as the steering commands do for a run in a store. The lines read ahead are handed back in
front of the rest, so a pipe is read once and whole.

One table per log: a later run started under another table is refused in the fold, and
that refusal names both tables (`TableMismatchError`); such a log is read with `--run-id`
and `--table`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator

from pydantic import ValidationError

from agentfsm.cli._common import registered_table
from agentfsm.cli._output import shown
from agentfsm.events.models import TableRef
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable

__all__ = ["table_of_log"]

# A log opens with a run.started; a log that does not within this many lines is folded with
# the default table (its own lines then say what is wrong), and memory stays bounded.
_LOOK_AHEAD = 1000
# A run.started line is small; a longer line is not parsed twice just to look.
_LONGEST_LOOKED_AT = 64 * 1024


def table_of_log(lines: Iterator[str], command: str) -> tuple[TransitionTable, Iterator[str]]:
    """The table the log's first `run.started` names, and the log's lines, none lost.

    Raises:
        UsageError: that table is not known (exit 2), naming the run, the line and the table.
    """
    ahead: list[str] = []
    table = DEFAULT_TABLE
    for number, raw in enumerate(lines, start=1):
        ahead.append(raw)
        started = _started(raw)
        if started is not None:
            run_id, ref = started
            if ref.digest != DEFAULT_TABLE.digest:
                where = f"run '{shown(run_id)}' (line {number})"
                table = registered_table(ref, command, where)
            break
        if number >= _LOOK_AHEAD:
            break
    return table, itertools.chain(ahead, lines)


def _started(raw: str) -> tuple[str, TableRef] | None:
    """The run id and table of a `run.started` line that names one; None for any other line
    (a line that is not an event is left for the fold to report)."""
    if len(raw) > _LONGEST_LOOKED_AT or '"run.started"' not in raw:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict) or value.get("type") != "run.started":
        return None
    run_id, table = value.get("run_id"), value.get("table")
    if not isinstance(run_id, str) or not isinstance(table, dict):
        return None
    try:
        return run_id, TableRef.model_validate(table)
    except ValidationError:
        return None
