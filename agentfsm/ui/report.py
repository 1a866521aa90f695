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

from agentfsm.diagrams._trajectory import Refusal, Step, Trajectory, fold_trajectory
from agentfsm.errors import EventFormatError
from agentfsm.events._lines import is_blank, lines_of
from agentfsm.events.codec import event_to_dict, parse_event
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.ui._pages import table_page
from agentfsm.ui._svg import diagram_svg
from agentfsm.ui._words import (
    MAX_LISTED,
    RECORD_BUDGET,
    clip,
    clipped,
    pretty_json,
    record_view,
    stop_words,
)

# The caps are the report's own: stated in `render_report`'s docstring, not API to import.
__all__ = ["render_report"]

#: Runs a report shows at most (the first ones of the log); the rest are counted.
MAX_RUNS = 20
#: Steps of a run a report lists, each with its event and the record after it (both cut to
#: a bound, see `record_view`); later steps are counted, and the diagram draws them all.
MAX_EVENTS = 2000
_ENVELOPE = ("run_id", "sequence", "type", "occurred_at")


@attrs.frozen
class _RecordedRun:
    run_id: str
    steps: list[dict[str, Any]]
    steps_not_listed: int
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
        run_ids: only these runs of the log (default: every run, up to 20; the rest are
            counted). A run lists its first 2,000 steps; the diagram draws them all.
        title: the page's title (default: the table's name).

    Raises:
        EventFormatError: not one line of `log` is an event, or a line of a file is too
            long or not UTF-8.
    """
    runs, left_out, problems = (
        _recorded(log, table, set(run_ids)) if log is not None else ([], _Named(), _Named())
    )
    env = Environment(loader=PackageLoader("agentfsm.ui", "templates"), autoescape=True)
    env.filters["json"] = pretty_json
    env.filters["clip"] = clip
    static = files("agentfsm.ui") / "static"
    style = (static / "app.css").read_text(encoding="utf-8") + (static / "report.css").read_text(
        encoding="utf-8"
    )
    script = (static / "zoom.js").read_text(encoding="utf-8") + (static / "report.js").read_text(
        encoding="utf-8"
    )
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
        left_out=left_out.names,
        left_out_count=left_out.count,
        problems=problems.names,
        problems_count=problems.count,
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


@attrs.define
class _Named:
    """Things named up to `MAX_LISTED`, and counted past that."""

    names: list[str] = attrs.field(factory=list)
    count: int = 0

    def add(self, name: str) -> None:
        self.count += 1
        if len(self.names) < MAX_LISTED:
            self.names.append(name)


def _recorded(
    log: Iterable[str | bytes], table: TransitionTable, wanted: set[str]
) -> tuple[list[_RecordedRun], _Named, _Named]:
    """The log's runs (up to `MAX_RUNS`), the runs left out, and lines that name no run.

    Only the events of the runs shown are kept: a log of a million runs costs one pass and
    the set of its run ids, not a million runs' events.
    """
    events: dict[str, list[Event]] = {}
    broken: dict[str, EventFormatError] = {}
    left_out = _Named()
    seen: set[str] = set()
    problems = _Named()
    any_event = False
    first_problem: EventFormatError | None = None

    def shown(run_id: str) -> bool:
        if run_id in events:
            return True
        if run_id in seen:
            return False
        seen.add(run_id)
        if (not wanted or run_id in wanted) and len(events) < MAX_RUNS:
            events[run_id] = []
            return True
        if not wanted or run_id in wanted:
            left_out.add(run_id)
        return False

    for number, raw in enumerate(lines_of(log), start=1):
        if is_blank(raw):
            continue
        try:
            event = parse_event(raw, line=number, events=table.event_types)
        except EventFormatError as exc:
            first_problem = first_problem or exc
            if exc.run_id is None:
                problems.add(str(exc))
            elif shown(exc.run_id) and exc.run_id not in broken:
                broken[exc.run_id] = exc
            continue
        any_event = True
        if shown(event.run_id) and event.run_id not in broken:
            events[event.run_id].append(event)
    if not any_event and first_problem is not None:
        raise first_problem
    runs = [_walk(run_id, evs, broken.get(run_id), table) for run_id, evs in events.items()]
    return runs, left_out, problems


def _walk(
    run_id: str, events: list[Event], bad_line: EventFormatError | None, table: TransitionTable
) -> _RecordedRun:
    steps: list[dict[str, Any]] = []
    not_listed = 0

    def shown(step: Step, before: RunRecord, record: RunRecord, event: Event) -> None:
        nonlocal not_listed
        if len(steps) == MAX_EVENTS:
            not_listed += 1
            return
        fields = {k: v for k, v in event_to_dict(event).items() if k not in _ENVELOPE}
        steps.append(
            {
                "seq": event.sequence,
                "type": event.type,
                "from": before.status,
                "to": record.status,
                "condition": step.condition,
                "at": event.occurred_at,
                "fields": clipped(fields)[0],
                "record": clipped(record_view(record, _about(event)), RECORD_BUDGET)[0],
            }
        )

    trajectory, record = fold_trajectory(
        run_id, events, table, Reducer(table), bad_line=bad_line, on_step=shown
    )
    refusal = trajectory.refusal
    allowed = table.allowed(refusal.state) if refusal is not None else ()
    words = stop_words(record, table)
    return _RecordedRun(run_id, steps, not_listed, trajectory, words, refusal, allowed)


def _about(event: Event) -> str | None:
    """The call an event is about, if any (`tool.*`, `approval.*` events name one)."""
    action_id = getattr(event, "action_id", None)
    return action_id if isinstance(action_id, str) else None
