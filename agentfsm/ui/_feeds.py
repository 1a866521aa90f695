"""What each live page's stream looks at, once a tick, and what it sends (see `_live`).

Each feed is called from the stream's loop and does its reading and rendering on the
server's thread pool, borrowing store handles for those reads only. What a feed keeps
between two looks is small and does not grow: a cursor, digests of what it sent, or the
keys of one inbox page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
from starlette.concurrency import run_in_threadpool

from agentfsm.stores.runs import RunOrder
from agentfsm.ui import _pages
from agentfsm.ui._live import digest, message
from agentfsm.ui._source import Source

__all__ = ["InboxFeed", "ListFeed", "Render", "RunFeed"]

#: Renders a template of the app to text, with the page's context (the request's).
Render = Callable[..., str]

#: The runs list's whole rows (drivers, where each stands) and its counts are rendered
#: again every this many looks, even when the index shows no run moved: a lease taken or
#: lapsed changes no index row.
REFRESH_EVERY = 5


@attrs.define
class RunFeed:
    """A run page's stream: once the run's index row shows a later version, the turn groups
    of the page's timeline the new events touched (while the page has room for them), and
    the run's version and status.

    Attributes:
        source: where the run is read.
        render: the app's template renderer.
        run_id: the run.
        after: the last event the page shows.
        until: the last event the page's timeline can show (its page's end; 0: none, a
            step-through or an earlier page, which are only told the run moved on).
        whole_table: the page shows the whole table (its step links keep it).
    """

    source: Source
    render: Render
    run_id: str
    after: int
    until: int
    whole_table: bool = False
    _seen: int = -1

    async def __call__(self) -> list[str]:
        return await run_in_threadpool(self._look)

    def _look(self) -> list[str]:
        info = self.source.info(self.run_id)  # one index row: all an idle run costs
        if info.version == self._seen:
            return []
        first = self._seen < 0
        self._seen = info.version
        if first and info.version <= self.after:
            return []  # as the page showed it
        data = _pages.timeline_update(self.source, self.run_id, self.after, self.until)
        record = data["record"]
        sent = []
        if data["groups"]:
            html = self.render(
                "_timeline_groups.html", groups=data["groups"], record=record, at=None,
                stepping=False, whole_table=self.whole_table,
            )  # fmt: skip
            sent.append(message("rows", html))
        self.after = data["shown"]
        state = {
            "version": record.version,
            "status": record.status,
            "shown": self.after,
            "more": record.version > self.after,
        }
        sent.append(message("run", state, id=str(self.after)))
        return sent


@attrs.define
class ListFeed:
    """The runs list's stream: the page's rows (and its pager) again once a run on it moved
    (its index rows read each look), and every `REFRESH_EVERY` looks the rows and the
    counts, each sent only when it changed.

    Attributes:
        source: where the runs are read.
        render: the app's template renderer.
        query: the list's parameters, as `_pages.runs_page` takes them (without `counts`).
    """

    source: Source
    render: Render
    query: dict[str, Any]
    _looks: int = 0
    _key: str | None = None
    _sent: dict[str, str] = attrs.field(factory=dict)

    async def __call__(self) -> list[str]:
        return await run_in_threadpool(self._look)

    def _look(self) -> list[str]:
        q = self.query
        full = self._looks % REFRESH_EVERY == 0
        self._looks += 1
        order: RunOrder = q["sort"]
        page = self.source.runs_page(
            status=q["status"], table=q["table"], search=q["search"], after=q["after"],
            limit=q["limit"], order=order,
        )  # fmt: skip
        rows = [(r.info.run_id, r.info.version, r.info.status, r.reading) for r in page.rows]
        key = digest(repr(rows))
        if key == self._key and not full:
            return []
        self._key = key
        data = _pages.runs_page(self.source, **q, counts=full)
        parts = {
            "rows": self.render("_run_rows.html", **data),
            "pager": self.render("_run_pager.html", **data),  # its cursor moves with the rows
        }
        if full:
            parts["counts"] = self.render("_run_counts.html", **data)
        sent = []
        for name, html in parts.items():
            if self._sent.get(name) != (said := digest(html)):
                self._sent[name] = said
                sent.append(message(name, html))
        return sent


@attrs.define
class InboxFeed:
    """The inbox's stream: the keys of its page of waiting calls first (a call decided
    between the page and the stream makes the page say so), then the calls no longer
    waiting, and the sections of the calls that came, each sent once.

    Attributes:
        source: where the calls are read.
        render: the app's template renderer.
        after: the page's cursor: the run it starts in or after.
        after_call: ... and the call of that run it starts after.
    """

    source: Source
    render: Render
    after: str | None
    after_call: str | None
    _shown: list[str] | None = None

    async def __call__(self) -> list[str]:
        return await run_in_threadpool(self._look)

    def _look(self) -> list[str]:
        page = self.source.pending(self.after, self.after_call)
        keys = [f"{c.record.run_id} {c.action_id}" for c in page.calls]
        if self._shown is None:
            self._shown = keys
            return [message("keys", sorted(keys))]
        before = set(self._shown)
        now = set(keys)
        self._shown = keys
        sent = []
        if gone := [k for k in before if k not in now]:
            sent.append(message("gone", sorted(gone)))
        came = [c for c in page.calls if f"{c.record.run_id} {c.action_id}" not in before]
        if came:
            groups = _pages.inbox_groups(self.source, came)
            sent.append(message("calls", self.render("_inbox_runs.html", groups=groups)))
        return sent
