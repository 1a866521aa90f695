"""What each page shows, gathered from a `Source` (plain dicts for the templates).

Blocking work (store reads, folds, Graphviz): the server calls these from its thread pool.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from agentfsm.events.codec import event_to_dict
from agentfsm.fsm.check import check_table
from agentfsm.fsm.table import TransitionTable
from agentfsm.record import Action
from agentfsm.ui._source import EVENTS_PER_PAGE, Source
from agentfsm.ui._svg import Diagram, diagram_svg
from agentfsm.ui._words import stop_words, usage_meters

__all__ = ["approvals_page", "run_page", "runs_page", "table_page", "table_rows"]

_ENVELOPE = ("run_id", "sequence", "type", "occurred_at")
_diagrams: OrderedDict[tuple[str, int], Diagram] = OrderedDict()
_diagrams_lock = threading.Lock()


def runs_page(
    source: Source, *, status: list[str], table: str | None, search: str | None,
    after: str | None, limit: int,
) -> dict[str, Any]:  # fmt: skip
    """The runs list: one page from the index, filtered."""
    page = source.runs_page(status=status, table=table, search=search, after=after, limit=limit)
    statuses = sorted({s for t in source.tables() for s in t.state_names})
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
                    else row.problem
                ),
                "children": row.info.run_id.count("/"),
            }
            for row in page.rows
        ],
        "statuses": statuses,
        "table_names": sorted({t.name for t in source.tables()}),
        "filters": {"status": status, "table": table or "", "q": search or ""},
    }


def _run_diagram(source: Source, run_id: str) -> Diagram:
    path = source.path(run_id)
    key = (run_id, path.version)
    with _diagrams_lock:
        cached = _diagrams.get(key)
    if cached is not None:
        return cached
    drawn = diagram_svg(source.table_of(run_id), path.trajectory)
    with _diagrams_lock:
        _diagrams[key] = drawn
        while len(_diagrams) > 16:
            _diagrams.popitem(last=False)
    return drawn


def run_page(source: Source, run_id: str, page: int | None, at: int | None) -> dict[str, Any]:
    """A run: record, limits, actions, one page of its timeline, its path and a step."""
    record = source.record(run_id)
    table = source.table_of(run_id)
    path = source.path(run_id)
    version = record.version
    pages = max(1, -(-version // EVENTS_PER_PAGE))
    if at is not None:
        at = min(max(at, 1), version) if version else None
    if page is None:
        page = pages if at is None else (at - 1) // EVENTS_PER_PAGE + 1
    page = min(max(page, 1), pages)
    events = source.events_page(run_id, page)
    step_at = at if at is not None else version
    at_record = source.record_at(run_id, step_at) if at is not None else record
    state_at = at_record.status
    timeline = [
        {
            "sequence": e.sequence,
            "type": e.type,
            "occurred_at": e.occurred_at,
            "move": path.trajectory.steps[e.sequence - 1]
            if e.sequence <= len(path.trajectory.steps)
            else None,
            "fields": {k: v for k, v in event_to_dict(e).items() if k not in _ENVELOPE},
            "action_id": getattr(e, "action_id", None),
        }
        for e in events
    ]
    touched = [str(t["action_id"]) for t in timeline if t["action_id"]]
    shown_ids = list(dict.fromkeys([*record.pending_approvals, *record.batch, *touched]))
    actions = [_action(record.actions[a], run_id) for a in shown_ids if a in record.actions]
    refusal = source.refusals.get(run_id)
    children = source.children(run_id)
    return {
        "record": record,
        "table": table,
        "words": stop_words(record, table),
        "meters": usage_meters(record),
        "actions": actions,
        "actions_total": len(record.actions),
        "timeline": timeline,
        "page": page,
        "pages": pages,
        "per_page": EVENTS_PER_PAGE,
        "at": step_at,
        "stepping": at is not None,
        "state_at": state_at,
        "at_record": _record_view(at_record),
        "at_event": next((t for t in timeline if t["sequence"] == step_at), None),
        "diagram": _run_diagram(source, run_id),
        "parent": source.parent(run_id),
        "children": children,
        "refusal": refusal[0] if refusal else None,
        "allowed": refusal[1] if refusal else (),
        "child_ids": {c.run_id for c in children},
    }


def _action(action: Action, run_id: str) -> dict[str, Any]:
    return {
        "action_id": action.action_id,
        "tool": action.tool,
        "arguments": action.arguments,
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


def _record_view(record: Any) -> dict[str, Any]:
    """The record as JSON, with the ledger cut to the current batch and pending calls (the
    whole ledger of a long run is hundreds of kilobytes; `record.json` serves it)."""
    data: dict[str, Any] = record.to_json()
    keep = set(record.batch) | set(record.pending_approvals)
    actions = data.get("actions", {})
    data["actions"] = {k: v for k, v in actions.items() if k in keep}
    data["actions_not_shown"] = len(actions) - len(data["actions"])
    return data


def approvals_page(source: Source, after: str | None) -> dict[str, Any]:
    """Every call waiting for a decision, with its run's context."""
    calls, more = source.pending(after)
    items = []
    for call in calls:
        record = call.record
        action = record.actions[call.action_id]
        batch = [
            record.actions[a] for a in record.batch if a != call.action_id and a in record.actions
        ]
        items.append(
            {
                "record": record,
                "table": call.table,
                "action": _action(action, record.run_id),
                "batch": [_action(a, record.run_id) for a in batch],
                "meters": usage_meters(record),
                "parent": source.parent(record.run_id),
            }
        )
    return {"items": items, "more": more}


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
    states = [
        {
            "name": s.name,
            "description": s.description,
            "kind": str(s.kind),
            "initial": s.name == table.initial,
            "out": [r for r in rows if r["source"] == s.name],
            "into": sorted({r["source"] for r in rows if r["target"] == s.name}),
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
