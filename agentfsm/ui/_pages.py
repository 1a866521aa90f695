"""What each page shows, gathered from a `Source` (plain dicts for the templates).

Blocking work (store reads, folds, Graphviz): the server calls these from its thread pool.

Every page is bounded whatever the store holds: lists that grow with a run (its calls, its
events, its subagent runs) are paged or named up to a few and counted, and nothing is drawn
per item x per item (the inbox draws each waiting call once, its batch summarised once per
run). Values a model makes (arguments, results, fields) are cut by the `json` filter.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from agentfsm.events._canonical import digest
from agentfsm.events.codec import event_to_dict
from agentfsm.events.models import Event, ModelCompleted
from agentfsm.fsm.check import check_table
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import ActionStatus, StateKind
from agentfsm.record import Action, RunRecord
from agentfsm.reducers.diff import diff_runs
from agentfsm.stores._load import close_iterator
from agentfsm.stores.base import EventStore
from agentfsm.stores.runs import RunInfo, RunOrder
from agentfsm.ui._pool import SizedCache
from agentfsm.ui._source import (
    CALLS_PER_PAGE,
    EVENTS_PER_PAGE,
    INBOX_RUNS,
    InboxPage,
    PendingCall,
    RunPath,
    RunRow,
    RunsPage,
    Source,
)
from agentfsm.ui._svg import RUN_DIAGRAMS, Diagram, diagram_svg, run_diagram
from agentfsm.ui._timeline import record_changes, turn_groups
from agentfsm.ui._words import (
    batch_summary,
    clipped,
    pretty_clipped,
    record_view,
    stop_words,
    usage_meters,
)

__all__ = [
    "ACTIONS_PER_PAGE",
    "CHILDREN_SHOWN",
    "DECIDE_BUDGET",
    "DIFF_EVENTS",
    "LEDGER_PAGE",
    "OTHERS_SHOWN",
    "READING",
    "SORTS",
    "approvals_page",
    "diff_page",
    "event_pin",
    "inbox_groups",
    "record_json",
    "run_page",
    "runs_page",
    "table_page",
    "table_rows",
    "timeline_update",
]

#: Rows per page of a run page's actions table.
ACTIONS_PER_PAGE = 50
#: Subagent runs a run page links by name; the runs list (`q=RUN/`) pages the rest.
CHILDREN_SHOWN = 20
#: Calls of its batch an inbox run names besides those on the page; its run page has all.
OTHERS_SHOWN = 10
#: Characters of a waiting call's arguments the inbox shows: more than anywhere else, since
#: a person decides on them (past that the card says so and links the whole call).
DECIDE_BUDGET = 20_000
#: Ledger entries per answer of `/run/record.json` (`actions_next` names the next answer).
LEDGER_PAGE = 1000
#: Events of each run the diff page lists from where the two part (the rest counted).
DIFF_EVENTS = 100

_ENVELOPE = ("run_id", "sequence", "type", "occurred_at")


#: Runs the runs list counts one by one, per status and in all, unless told otherwise
#: (`UIConfig.count_up_to`); past it, the store estimates ("about 120,000"): a count stops
#: after this many index entries (~0.3 ms on SQLite), so the counts cost the same whatever
#: the store holds.
COUNT_CAP = 10_000
#: The runs list's orders, as its `sort=` says them, with their words.
SORTS = {
    "newest": "newest first",
    "oldest": "oldest first",
    "run_id": "by run id",
    "status": "by status, then run id",
}
#: Index pages the runs list reads to fill a page filtered on what only records know (the
#: objective, agent or tools, the start date); it then says where to go on.
FILTER_PAGES = 20
#: Earlier pages' cursors the runs list carries in its address for "previous page".
TRAIL_KEPT = 50
#: What a runs list's row says while another page reads its run's record (`RunRow.reading`).
READING = "reading its record…"


def runs_page(
    source: Source, *, status: list[str], table: str | None, search: str | None,
    after: str | None, limit: int, text: str | None = None, since: str | None = None,
    until: str | None = None, trail: Sequence[str] = (), counts: bool = True,
    sort: RunOrder = "newest", count_up_to: int = COUNT_CAP,
) -> dict[str, Any]:  # fmt: skip
    """The runs list: one page from the index in `sort` order, filtered. `text` keeps runs
    whose objective, agent or a tool they called holds it (any case); `since`/`until`
    (YYYY-MM-DD) keep runs started in that range; `trail` is the cursors of the pages
    before (for "previous"). With `counts`, the runs per status and how many match the
    status filter (counted up to `count_up_to`, estimated past it)."""
    wanted = text.casefold() if text else None
    if wanted or since or until:
        rows: list[RunRow] = []
        cursor, scanned, pages = after, 0, 0
        while pages < FILTER_PAGES:
            # These filters read the record: a row must wait for it.
            page = source.runs_page(
                status=status, table=table, search=search, after=cursor, limit=limit, order=sort,
                record_wait=None,
            )  # fmt: skip
            pages += 1
            scanned += page.scanned
            rows += [r for r in page.rows if _matches(r, wanted, since, until)]
            cursor = page.next_after
            if len(rows) >= limit or cursor is None:
                break
        cut = rows[:limit]
        more = cursor is not None or len(rows) > limit
        page = RunsPage(
            tuple(cut),
            (cut[-1].info.run_id if cut else cursor) if more else None,
            scanned,
            page.order,
        )
    else:
        page = source.runs_page(
            status=status, table=table, search=search, after=after, limit=limit, order=sort
        )
    statuses = sorted({s for t in source.tables() for s in t.state_names})
    trail = [t for t in trail if t][-TRAIL_KEPT:]
    return {
        "page": page,
        "rows": [
            {
                "row": row,
                # By the run's own table (cached since its record was read): its kinds say
                # whether it ended or waits.
                "words": (
                    stop_words(row.record, source.table_of(row.info.run_id))
                    if row.record
                    else (READING if row.reading else row.problem)
                ),
                "children": row.info.run_id.count("/"),
                "driver": _driver(source, row),
            }
            for row in page.rows
        ],
        "statuses": statuses,
        "counts": _counts(source, statuses, count_up_to) if counts else [],
        "total": source.count(status, count_up_to) if counts else None,
        "sorts": SORTS,
        "sort": page.order,
        "sorted_as_asked": page.order == sort,
        # Filters the index cannot apply: the page reads on through it to fill itself.
        "scanning": bool(wanted or since or until or table or search),
        "table_names": sorted({t.name for t in source.tables()}),
        "filters": {
            "sort": sort,
            "status": status,
            "table": table or "",
            "q": search or "",
            "text": text or "",
            "since": since or "",
            "until": until or "",
        },
        # The pages before are a trail of cursors (the first page has none): "previous" goes
        # back one; past `TRAIL_KEPT` pages it goes back to the first.
        "previous": trail[-1] if trail else None,
        "has_previous": after is not None,
        "trail_back": trail[:-1],
        "trail_next": [*trail, after][-TRAIL_KEPT:] if after else [],
    }


def _matches(row: RunRow, text: str | None, since: str | None, until: str | None) -> bool:
    record = row.record
    if record is None:
        return False
    if since or until:
        day = (record.started_at or row.info.updated_at or "")[:10]
        if not day or (since and day < since) or (until and day > until):
            return False
    if text:
        said = [record.objective, record.current_agent]
        if not any(isinstance(t, str) and text in t.casefold() for t in said) and not any(
            text in a.tool.casefold() for a in record.actions.values()
        ):
            return False
    return True


def _counts(source: Source, statuses: list[str], up_to: int) -> list[dict[str, Any]]:
    """Runs per status from the index, each counted up to `up_to` and estimated past it
    (one bounded index read per status, whatever the store holds); statuses with none left
    out."""
    found = [(s, source.count([s], up_to)) for s in statuses]
    return [{"status": s, "count": n} for s, n in found if n.count]


def _driver(source: Source, row: RunRow) -> str | None:
    """Who drives a run that has not ended: "worker w-3 (host)" or None if nobody does."""
    record = row.record
    if record is None:
        return None
    table = source.table_of(row.info.run_id)
    if table.is_terminal(record.status):
        return None
    holder = source.use(row.info.run_id, lambda store: store.holder(row.info.run_id))
    if holder is None:
        return ""
    return f"{holder.id}{f' on {holder.host}' if holder.host else ''}"


#: Which drawing of `RUN_DIAGRAMS` each (run, version, view) is: writing a long run's DOT
#: source to find its drawing costs more than the rest of a timeline page (a 10,000-event
#: path), so each page of a run at a version finds it here. Keys only, bounded by count.
_drawing_of: SizedCache[tuple[str, int, bool], tuple[str, bool, str]] = SizedCache(
    4096, 4096, lambda _: 1
)


def _run_diagram(source: Source, run_id: str, path_only: bool) -> Diagram:
    """The run's picture, drawn once per path (see `run_diagram`)."""
    path = source.path(run_id)
    at = (run_id, path.version, path_only)
    known = _drawing_of.get(at)
    found = RUN_DIAGRAMS.get(known) if known is not None else None
    if found is not None:
        return found
    table = source.table_of(run_id)
    drawn, key = run_diagram(table, path.trajectory, path_only=path_only)
    if key is not None:
        _drawing_of.put(at, key)
    return drawn


def run_page(
    source: Source, run_id: str, page: int | None, at: int | None,
    actions_page: int | None = None, whole_table: bool = False, compare: int | None = None,
    around: tuple[Sequence[RunInfo], str | None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A run: record, limits, a page of its actions, one page of its timeline, its path and
    a step. The diagram is the run's path only (the states it visited) unless
    `whole_table`. Stepping (`at`), the page says what changed in the record since the
    event before, or since event `compare`. `around`: the run's subagent runs and parent,
    when the caller read them already (the server keys its cached pages by them)."""
    # The path first: its fold yields the record too, so a first view reads the log once,
    # not the snapshot and its tail and then the whole log again.
    path = source.path(run_id)
    record = source.record(run_id)
    table = source.table_of(run_id)
    version = record.version
    pages = max(1, -(-version // EVENTS_PER_PAGE))
    if at is not None:
        at = min(max(at, 1), version) if version else None
    if page is None:
        page = pages if at is None else (at - 1) // EVENTS_PER_PAGE + 1
    page = min(max(page, 1), pages)
    events = source.events_page(run_id, page)
    step_at = at if at is not None else version
    before: RunRecord | None = None
    if at is None:
        at_record = record
    elif compare is None and step_at > 1:
        before, at_record = _records_around(source, run_id, step_at)
    else:
        at_record = source.record_at(run_id, step_at)
    state_at = at_record.status
    timeline = _timeline(events, path, record)
    groups = turn_groups(timeline, record.started_at, _turns_before(path, page))
    if at is not None:
        since = step_at - 1 if compare is None else min(max(compare, 0), version)
        if since >= 1 and before is None:
            before = source.record_at(run_id, since)
        changes = record_changes(before if since >= 1 else None, at_record)
    else:
        since, changes = None, None
    touched = [str(t["action_id"]) for t in timeline if t["action_id"]]
    selected = [
        a
        for a in dict.fromkeys([*record.pending_approvals, *record.batch, *touched])
        if a in record.actions
    ]
    action_pages = max(1, -(-len(selected) // ACTIONS_PER_PAGE))
    actions_page = min(max(actions_page or 1, 1), action_pages)
    first = (actions_page - 1) * ACTIONS_PER_PAGE
    shown = selected[first : first + ACTIONS_PER_PAGE]
    actions = [_action(record.actions[a], run_id) for a in shown]
    refusal = source.refusals.get(run_id)
    children, parent = around if around is not None else (source.children(run_id), None)
    if around is None:
        parent = source.parent(run_id)
    about = at_event["action_id"] if (at_event := _event_at(timeline, step_at)) else None
    return {
        "record": record,
        "table": table,
        "words": stop_words(record, table),
        "meters": usage_meters(record),
        "actions": actions,
        "actions_selected": len(selected),
        "actions_first": first + 1,
        "actions_page": actions_page,
        "action_pages": action_pages,
        "actions_total": len(record.actions),
        "batch": batch_summary(record),
        "timeline": timeline,
        "groups": groups,
        "types": sorted({t["type"] for t in timeline}),
        "action_ids": list(dict.fromkeys(str(t["action_id"]) for t in timeline if t["action_id"])),
        "changes": changes,
        "since": since,
        "page": page,
        "pages": pages,
        "per_page": EVENTS_PER_PAGE,
        "at": step_at,
        "stepping": at is not None,
        "state_at": state_at,
        "at_record": record_view(at_record, about),
        "at_event": at_event,
        "at_pin": event_pin(pinned) if (pinned := source.event(run_id, step_at)) else None,
        "diagram": _run_diagram(source, run_id, not whole_table),
        "whole_table": whole_table,
        "step_move": _step_move(path.trajectory.steps, step_at),
        "parent": parent,
        "children": children[:CHILDREN_SHOWN],
        "children_more": len(children) > CHILDREN_SHOWN,
        "refusal": refusal[0] if refusal else None,
        "allowed": refusal[1] if refusal else (),
        "child_ids": {c.run_id for c in children},
        "steer": steering(table, record),
    }


def _timeline(events: Sequence[Event], path: RunPath, record: RunRecord) -> list[dict[str, Any]]:
    """A page of the timeline's rows: each event, the move it made, its fields (and their
    JSON as the page shows it, cut or not)."""
    steps = path.trajectory.steps
    rows = []
    for e in events:
        fields = {k: v for k, v in event_to_dict(e).items() if k not in _ENVELOPE}
        text, cut = pretty_clipped(fields, plain=True)  # a JSON-mode dump: plain JSON
        action_id = getattr(e, "action_id", None)
        call = record.actions.get(action_id) if action_id else None
        rows.append({
            "sequence": e.sequence,
            "type": e.type,
            "occurred_at": e.occurred_at,
            "move": steps[e.sequence - 1] if e.sequence <= len(steps) else None,
            "fields": fields,
            "json": text,
            "cut": cut,
            "action_id": action_id,
            "tool": call and call.tool if action_id else None,
        })  # fmt: skip
    return rows


def _turns_before(path: RunPath, page: int) -> int:
    """The turns the run had begun before timeline page `page` (turns are numbered as the
    run counts them)."""
    first_seq = (page - 1) * EVENTS_PER_PAGE
    return sum(1 for s in path.trajectory.steps[:first_seq] if s.event == "model.started")


def timeline_update(source: Source, run_id: str, after: int, until: int) -> dict[str, Any]:
    """What a live run page is sent once the run went past event `after`: its record, and,
    while the page's timeline (which ends at event `until`) has room, the turn groups of
    that page the new events touched or began, each whole (a group's bars span its turn).
    Bounded by one page: at most 100 events read, of the page `after + 1` is on."""
    path = source.path(run_id)  # folded on by the new events: its record is the run's now
    record = source.record(run_id)
    last = min(record.version, until)
    groups: list[dict[str, Any]] = []
    if after < last:
        page = after // EVENTS_PER_PAGE + 1
        events = [e for e in source.events_page(run_id, page) if e.sequence <= last]
        timeline = _timeline(events, path, record)
        every = turn_groups(timeline, record.started_at, _turns_before(path, page))
        groups = [g for g in every if g["rows"] and g["rows"][-1]["sequence"] > after]
    return {"record": record, "groups": groups, "shown": max(last, after)}


def event_pin(event: Event) -> str:
    """What a fork from `event` is pinned to: the digest of the event as the page showed it,
    so a fork is of exactly the events a person looked at (the form carries it back)."""
    return digest(event_to_dict(event))


def diff_page(source: Source, a: str, b: str) -> dict[str, Any]:
    """Two runs compared: where they part, their events from there, the fields their final
    records differ in, and both paths on run `a`'s picture (the states `b` visited marked)."""

    def compare(store: Any) -> Any:
        return diff_runs(store.events(a), store.events(b), reducer=store.reducer, limit=DIFF_EVENTS)

    found = source.use(a, compare)
    visited = frozenset(source.path(b).trajectory.visited)
    return {
        "diff": found,
        "a": found.a,
        "b": found.b,
        "rows": list(itertools.zip_longest(found.a.events, found.b.events)),
        "differences": [
            {"name": name, "a": pair[0], "b": pair[1]} for name, pair in found.differences.items()
        ],
        "diagram": _run_diagram(source, a, False),
        "also": visited,
        "envelope": _ENVELOPE,
    }


def steering(table: TransitionTable, record: RunRecord) -> dict[str, bool]:
    """Which steering buttons a run's page draws: those whose event the table allows in
    the run's state now (a Pause on a run waiting for approval would only be refused)."""
    allowed = set(table.allowed(record.status))
    going = table.kind(record.status) in (StateKind.ACTIVE, StateKind.IN_FLIGHT)
    return {
        "cancel": "run.cancel_requested" in allowed and not table.settles_cancel(record.status),
        "pause": "run.paused" in allowed,
        "resume": "run.resumed" in allowed and not going,
    }


def _records_around(source: Source, run_id: str, sequence: int) -> tuple[RunRecord, RunRecord]:
    """The records right before and right after the event at `sequence`, from one fold
    (from the path's checkpoint, as `Source.record_at` folds): a step's "what changed"
    costs one event more than the step, not a second fold."""
    path = source.path(run_id)
    base = max((s for s in path.checkpoints if s <= sequence - 1), default=0)
    start = path.checkpoints.get(base)

    def fold(store: EventStore) -> tuple[RunRecord, RunRecord]:
        record = start if start is not None else store.reducer.initial(run_id)
        previous = record
        events = store.events(run_id, after=base)
        try:
            for event in itertools.islice(events, sequence - base):
                previous, record = record, store.reducer.reduce(record, event)
        finally:
            close_iterator(events)
        return previous, record

    return source.use(run_id, fold)


def _step_move(steps: Sequence[Any], sequence: int) -> tuple[str, str] | None:
    """The (source, target) of the move event `sequence` made, if it made one."""
    if not 1 <= sequence <= len(steps):
        return None
    step = steps[sequence - 1]
    return (step.source, step.target)


def _event_at(timeline: list[dict[str, Any]], sequence: int) -> dict[str, Any] | None:
    return next((t for t in timeline if t["sequence"] == sequence), None)


def _action(action: Action, run_id: str) -> dict[str, Any]:
    return {
        "action_id": action.action_id,
        "tool": action.tool,
        "arguments": action.arguments,
        "cut": clipped(action.arguments, DECIDE_BUDGET)[1],
        "digest": action.arguments_digest,
        "status": action.status,
        "attempts": action.attempts,
        "idempotency_key": action.idempotency_key,
        "result": action.result,
        "error": action.error.model_dump(mode="json") if action.error else None,
        "approver": action.approver,
        "reason": action.reason,
        "expires_at": action.expires_at,
        "child": f"{run_id}/{action.action_id}",
    }


def approvals_page(
    source: Source, after: str | None, after_call: str | None = None,
    inbox: InboxPage | None = None, parents: Mapping[str, str | None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """A page of the calls waiting for a decision, grouped by run: each call once, with its
    run's context and its batch summarised once per run (counts by tool and status, and a
    few of its other calls by name), never every call with every other. `inbox` and
    `parents` (each run's parent): the page's calls and parents, when the caller read them
    already (the server keys its cached pages by them)."""
    if inbox is None:
        inbox = source.pending(after, after_call)
    groups = inbox_groups(source, inbox.calls, parents)
    return {
        "groups": groups,
        "keys": [f"{c.record.run_id} {c.action_id}" for c in inbox.calls],
        "next_run": inbox.next_run,
        "next_call": inbox.next_call,
        "first_page": after is None,
        "per_page": CALLS_PER_PAGE,
        "runs_read": INBOX_RUNS,
    }


def inbox_groups(
    source: Source, calls: Sequence[PendingCall], parents: Mapping[str, str | None] | None = None
) -> list[dict[str, Any]]:
    """The inbox's sections for `calls` (in inbox order): one per run, each call once."""
    by_run = itertools.groupby(calls, key=lambda c: c.record.run_id)
    return [_inbox_group(source, list(run_calls), parents) for _, run_calls in by_run]


#: Earlier calls with their results an inbox card shows (the most recent ones).
EARLIER_SHOWN = 3
#: Pages of a run's timeline (from its end) the inbox reads to find the decision that
#: proposed a waiting call (its text is the model's reasoning): bounded per run.
PROPOSAL_PAGES = 2


def _proposals(source: Source, record: RunRecord, wanted: set[str]) -> dict[str, Any]:
    """For each waiting call of `wanted`, the `model.completed` event that proposed it
    (looked for in the last `PROPOSAL_PAGES` pages of the timeline; absent past them)."""
    found: dict[str, Any] = {}
    last = max(1, -(-record.version // EVENTS_PER_PAGE))
    for page in range(last, max(last - PROPOSAL_PAGES, 0), -1):
        for event in source.events_page(record.run_id, page):
            if isinstance(event, ModelCompleted) and event.tool_calls:
                for tool_call in event.tool_calls:
                    if tool_call.action_id in wanted:
                        found.setdefault(tool_call.action_id, event)
        if wanted <= found.keys():
            break
    return found


def _earlier(record: RunRecord, wanted: set[str]) -> dict[str, list[dict[str, Any]]]:
    """For each call of `wanted`, the last calls that finished before it joined the ledger,
    with their results: one pass over the ledger for all of them (never one per call)."""
    finished: list[Action] = []
    out: dict[str, list[dict[str, Any]]] = {}
    for action_id, action in record.actions.items():
        if action_id in wanted:
            out[action_id] = [_action(a, record.run_id) for a in finished]
            if len(out) == len(wanted):
                break
        if action.status in (ActionStatus.SUCCEEDED, ActionStatus.FAILED):
            finished = [*finished[-(EARLIER_SHOWN - 1) :], action]
    return out


def _inbox_group(
    source: Source, calls: Sequence[PendingCall], parents: Mapping[str, str | None] | None
) -> dict[str, Any]:
    record = calls[0].record
    on_page = {c.action_id for c in calls}
    proposed = _proposals(source, record, on_page)
    earlier = _earlier(record, on_page)
    others = [a for a in record.batch if a not in on_page and a in record.actions]
    return {
        "record": record,
        "table": calls[0].table,
        "calls": [
            {
                **_action(record.actions[c.action_id], record.run_id),
                "proposed_at": (event := proposed.get(c.action_id)) and event.sequence,
                "said": event.output if event is not None else None,
                "earlier": earlier.get(c.action_id, []),
            }
            for c in calls
        ],
        "waiting": len(record.pending_approvals),
        "batch": batch_summary(record),
        "others": [_action(record.actions[a], record.run_id) for a in others[:OTHERS_SHOWN]],
        "others_more": max(len(others) - OTHERS_SHOWN, 0),
        "meters": usage_meters(record),
        "parent": (parents[record.run_id] if parents is not None else source.parent(record.run_id)),
    }


def record_json(
    record: RunRecord, after_action: str | None, next_url: Callable[[str], str]
) -> dict[str, Any]:
    """`/run/record.json`: the record as `RunRecord.to_json()` has it while its ledger fits
    one answer (`LEDGER_PAGE` entries); past that, a page of the ledger in the order calls
    joined it, after `after_action`, with `actions_not_shown` and `actions_next` (the URL of
    the next page, from `next_url(last_action_id)`; None on the last)."""
    actions = record.actions
    if after_action is None and len(actions) <= LEDGER_PAGE:
        return record.to_json()
    ids = iter(actions)
    if after_action is not None and after_action in actions:
        for aid in ids:  # one pass up to the cursor: the ledger's order is its only index
            if aid == after_action:
                break
    page = list(itertools.islice(ids, LEDGER_PAGE))
    more = next(ids, None) is not None
    data: dict[str, Any] = attrs.evolve(record, actions={a: actions[a] for a in page}).to_json()
    data["pending_approvals"] = list(record.pending_approvals)
    data["actions_not_shown"] = len(actions) - len(page)
    data["actions_next"] = next_url(page[-1]) if more and page else None
    return data


def table_rows(table: TransitionTable) -> list[dict[str, Any]]:
    """The transitions, one row each, in declaration order."""
    return [
        {
            "source": t.source,
            "event": t.event,
            "condition": t.condition.name if t.condition else None,
            "target": t.target,
            "guards": t.guards,
        }
        for t in table.transitions
    ]


def table_page(table: TransitionTable) -> dict[str, Any]:
    """A table: its diagram, each state's moves, the transitions and the static check."""
    rows = table_rows(table)
    out: dict[str, list[dict[str, Any]]] = {}
    into: dict[str, set[str]] = {}
    for r in rows:  # one pass, not one per state: states x transitions grows as a square
        out.setdefault(r["source"], []).append(r)
        into.setdefault(r["target"], set()).add(r["source"])
    states = [
        {
            "name": s.name,
            "description": s.description,
            "kind": str(s.kind),
            "initial": s.name == table.initial,
            "out": out.get(s.name, []),
            "into": sorted(into.get(s.name, ())),
            "allowed": table.allowed(s.name),
        }
        for s in table.states
    ]
    return {
        "table": table,
        "diagram": diagram_svg(table),
        "states": states,
        "rows": rows,
        "report": check_table(table),
    }
