"""`agentfsm report`: one self-contained HTML file for a design review.

The file holds the table's diagram (inline SVG, clickable states), each state's moves, the
transitions with their conditions and guards, the static check, and optionally recorded runs
to step through: each step's move, event and the record after it, and where a log broke the
lifecycle with what was allowed. Everything is inline (CSS, script, pictures); its
Content-Security-Policy allows no request at all, so it opens from an email attachment and
fetches nothing.

The runs' data sits in `<script type="application/json">` blocks with `<`, `>` and `&`
escaped, and the script puts text on the page with `textContent` only: a log's contents stay
text.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable
from importlib.resources import files
from typing import Any

import attrs
from jinja2 import Environment, PackageLoader
from markupsafe import Markup

from agentfsm.diagrams.trajectory import Refusal, Step, Trajectory, fold_trajectory
from agentfsm.errors import EventFormatError
from agentfsm.events.codec import event_to_dict, parse_event
from agentfsm.events.lines import is_blank, lines_of
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.ui._pages import table_page
from agentfsm.ui._svg import diagram_svg
from agentfsm.ui._words import pretty_json, stop_words

__all__ = ["MAX_EVENTS", "MAX_RUNS", "render_report"]

#: Runs a report shows at most (the first ones of the log); the rest are named.
MAX_RUNS = 20
#: Steps of a run a report carries the record for; later steps show their move only.
MAX_EVENTS = 2000
_ENVELOPE = ("run_id", "sequence", "type", "occurred_at")


@attrs.frozen
class _RecordedRun:
    run_id: str
    steps: list[dict[str, Any]]
    trajectory: Trajectory
    words: str
    refusal: Refusal | None
    allowed: tuple[str, ...]


def render_report(
    table: TransitionTable = DEFAULT_TABLE,
    log: Iterable[str | bytes] | None = None,
    *,
    run_ids: Iterable[str] = (),
    title: str | None = None,
) -> str:
    """The review file's HTML.

    Args:
        table: the table to show (and the runs' table).
        log: JSON Lines of recorded runs to step through (optional), or an open file
            (read one bounded line at a time).
        run_ids: only these runs of the log (default: every run, up to `MAX_RUNS`).
        title: the page's title (default: the table's name).

    Raises:
        EventFormatError: not one line of `log` is an event, or a line of a file is too
            long or not UTF-8.
    """
    runs, left_out, problems = (
        _recorded(log, table, set(run_ids)) if log is not None else ([], [], [])
    )
    env = Environment(loader=PackageLoader("agentfsm.ui", "templates"), autoescape=True)
    env.filters["json"] = pretty_json
    static = files("agentfsm.ui") / "static"
    style = (static / "app.css").read_text(encoding="utf-8") + (static / "report.css").read_text(
        encoding="utf-8"
    )
    script = (static / "report.js").read_text(encoding="utf-8")
    csp = (
        "default-src 'none'; img-src data:; "
        f"style-src {_hash(style)}; script-src {_hash(script)}; "
        "form-action 'none'; base-uri 'none'"
    )
    return env.get_template("report.html").render(
        title=title or f"Table {table.name}",
        csp=csp,
        style=Markup(style),  # noqa: S704 - our own file: CSS, no data in it
        script=Markup(script),  # noqa: S704 - our own file
        runs=[
            {
                "run": run,
                "diagram": diagram_svg(table, run.trajectory),
                "data": _embedded({"steps": run.steps}),
            }
            for run in runs
        ],
        left_out=left_out,
        problems=problems,
        **table_page(table),
    )


def _hash(text: str) -> str:
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode()
    return f"'sha256-{digest}'"


def _embedded(value: Any) -> Markup:
    """JSON for a `<script type="application/json">` block: nothing in it can end the block
    or start markup."""
    text = json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    return Markup(text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))  # noqa: S704


def _recorded(
    log: Iterable[str | bytes], table: TransitionTable, wanted: set[str]
) -> tuple[list[_RecordedRun], list[str], list[str]]:
    """The log's runs (up to `MAX_RUNS`), the ids left out, and lines that name no run.

    One pass that holds the events of the runs shown only: whether a run is shown is known
    when it first appears (the first `MAX_RUNS` wanted), so a log of many runs costs their
    ids, not their events.
    """
    events: dict[str, list[Event]] = {}  # the runs shown, in order of first appearance
    left_out: dict[str, None] = {}
    broken: dict[str, EventFormatError] = {}
    problems: list[str] = []
    any_event = False
    first_problem: EventFormatError | None = None

    def kept_of(run_id: str) -> list[Event] | None:
        """The events kept of run `run_id`, or None when it is not shown."""
        if wanted and run_id not in wanted:
            return None
        kept = events.get(run_id)
        if kept is None and run_id not in left_out:
            if len(events) < MAX_RUNS:
                kept = events[run_id] = []
            else:
                left_out[run_id] = None
        return kept

    for number, raw in enumerate(lines_of(log), start=1):
        if is_blank(raw):
            continue
        try:
            event = parse_event(raw, line=number, events=table.event_types)
        except EventFormatError as exc:
            first_problem = first_problem or exc
            if exc.run_id is None:
                problems.append(str(exc))
            elif kept_of(exc.run_id) is not None:
                broken.setdefault(exc.run_id, exc)
            continue
        any_event = True
        kept = kept_of(event.run_id)
        if kept is not None and event.run_id not in broken:
            kept.append(event)
    if not any_event and first_problem is not None:
        raise first_problem
    runs = [_walk(run_id, kept, broken.get(run_id), table) for run_id, kept in events.items()]
    return runs, list(left_out), problems


def _walk(
    run_id: str, events: list[Event], bad_line: EventFormatError | None, table: TransitionTable
) -> _RecordedRun:
    steps: list[dict[str, Any]] = []

    def shown(step: Step, before: RunRecord, record: RunRecord, event: Event) -> None:
        row: dict[str, Any] = {
            "seq": event.sequence,
            "type": event.type,
            "from": before.status,
            "to": record.status,
            "condition": step.condition,
            "at": event.occurred_at,
            "fields": {k: v for k, v in event_to_dict(event).items() if k not in _ENVELOPE},
        }
        if len(steps) < MAX_EVENTS:
            row["record"] = _trimmed(record.to_json(), record)
        steps.append(row)

    trajectory, record = fold_trajectory(
        run_id, events, table, Reducer(table), bad_line=bad_line, on_step=shown
    )
    refusal = trajectory.refusal
    allowed = table.allowed(refusal.state) if refusal is not None else ()
    return _RecordedRun(run_id, steps, trajectory, stop_words(record, table), refusal, allowed)


def _trimmed(data: dict[str, Any], record: Any) -> dict[str, Any]:
    keep = set(record.batch) | set(record.pending_approvals)
    actions = data.get("actions", {})
    if len(actions) > 20:  # a long run's ledger is big: keep what the step is about
        data["actions"] = {k: v for k, v in actions.items() if k in keep}
        data["actions_not_shown"] = len(actions) - len(data["actions"])
    return data
