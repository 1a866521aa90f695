"""The web app: Starlette routes over a `Source`, server-rendered, autoescaped pages.

Pages (GET): `/` runs, `/run?id=` a run, `/approvals` the inbox, `/tables` and
`/table?digest=` tables, `/run/record.json`, `/run/action.json` and `/run/event.json` (what
a page cut, whole), `/run/version`, `/approvals/count` (for the page's polling). Each answer
is bounded whatever the store holds (see `_pages`). Mutations (POST, absent in read-only
mode): `/act/approve`, `/act/reject`, `/act/cancel`, `/act/pause`, `/act/resume`; each
needs the token and the CSRF token (see `_security`), and appends through
`agentfsm.runtime.control`, so the reducer judges every decision like any other event.
Errors are pages with a sentence, never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from importlib.resources import files
from typing import Any
from urllib.parse import urlencode

import attrs
from jinja2 import Environment, PackageLoader
from markupsafe import Markup
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentfsm.errors import (
    AgentFSMError,
    LifecycleError,
    RunHeldError,
    RunNotFoundError,
    UnknownRunTableError,
)
from agentfsm.events.codec import event_to_dict
from agentfsm.events.models import parse_timestamp
from agentfsm.names import ActionStatus
from agentfsm.record import RunRecord
from agentfsm.runtime import control
from agentfsm.stores.base import EventStore
from agentfsm.stores.runs import RunOrder
from agentfsm.ui import _pages
from agentfsm.ui._feeds import InboxFeed, ListFeed, RunFeed
from agentfsm.ui._html import timeline_rows
from agentfsm.ui._live import LiveConfig, Step, StreamResponse, Streams, stream
from agentfsm.ui._pages import DECIDE_BUDGET
from agentfsm.ui._pool import SizedCache
from agentfsm.ui._security import COOKIE, SECURITY_HEADERS, csrf_token, same_secret
from agentfsm.ui._source import Source
from agentfsm.ui._words import MAX_LISTED, RECORD_BUDGET, clip, named, pretty_json

__all__ = ["UIConfig", "create_app"]

_log = logging.getLogger("agentfsm.ui")
_MAX_FIELD = 10_000

#: Rendered pages (run pages, the approvals inbox, the runs list, tables) an app keeps, at
#: most, by count and by bytes. A page is kept under everything it was rendered from: a
#: run's page under the run's version (its events are append-only, so the page of a run at
#: version V never changes), its subagent runs' statuses and its parent, the address's
#: parameters, and whether the reader signed in and as whom; a page read while the run
#: moved on is not kept. So a page served from here is byte for byte the one that would be
#: rendered now, and rendering (half the server's work per request before, issue 32) is
#: done once per change.
_PAGE_CACHE_ITEMS = 1024
_PAGE_CACHE_BYTES = 32 * 2**20
#: Rendered rows of the runs list, by the index row, the record's version, its table and
#: driver: a list page renders only the rows that changed since a page last showed them.
_ROW_CACHE_ITEMS = 8192
_ROW_CACHE_BYTES = 8 * 2**20


@attrs.frozen
class UIConfig:
    """How the app behaves.

    Attributes:
        token: the secret every mutation needs.
        read_only: serve no mutations at all (the routes do not exist).
        allowed_hosts: the `Host` names the app answers (`*` for any).
        page_size: runs per page of the runs list.
        poll_seconds: how often pages ask whether something changed (0: never).
        identity_header: the request header in which the deployment's proxy names the
            signed-in person (`X-Forwarded-User`, `X-Auth-Request-User`...). When set, a
            decision's approver (and a cancel's "asked by") is that header's value, shown on
            the forms and not typed; a change without it is refused. Only set it behind a
            proxy that sets the header itself and strips it from what clients send.
        count_up_to: how many runs the runs list counts one by one (per status, and those
            matching its status filter) before the store estimates ("about 120,000").
        live: how pages are kept live by server-sent events (`LiveConfig`); a page the
            server refuses a stream, or a browser without `EventSource`, polls every
            `poll_seconds` instead.
    """

    token: str
    read_only: bool = False
    allowed_hosts: tuple[str, ...] = ("127.0.0.1", "localhost", "::1", "[::1]")
    page_size: int = 50
    poll_seconds: float = 3.0
    identity_header: str | None = None
    count_up_to: int = _pages.COUNT_CAP
    live: LiveConfig = attrs.field(factory=LiveConfig)


class _Headers:
    """Adds the security headers to every response (errors and static files too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                for name, value in SECURITY_HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


def create_app(source: Source, config: UIConfig) -> Starlette:
    """The ASGI app serving `source` under `config`."""
    # No auto_reload: the templates are the package's and do not change under a running
    # server, and checking would stat each template file on every include (50 per inbox).
    env = Environment(
        loader=PackageLoader("agentfsm.ui", "templates"), autoescape=True, auto_reload=False
    )
    env.filters["json"] = pretty_json
    env.filters["clip"] = clip
    env.filters["named"] = named
    env.globals["decide_budget"] = DECIDE_BUDGET
    env.globals["record_budget"] = RECORD_BUDGET
    csrf = csrf_token(config.token)

    live = config.live
    streams = Streams(live.max_streams)
    pages: SizedCache[tuple[Any, ...], bytes] = SizedCache(
        _PAGE_CACHE_ITEMS, _PAGE_CACHE_BYTES, lambda body: 512 + len(body)
    )
    rows: SizedCache[tuple[Any, ...], Markup] = SizedCache(
        _ROW_CACHE_ITEMS, _ROW_CACHE_BYTES, lambda html: 256 + sys.getsizeof(html)
    )
    row_template = env.get_template("_run_row.html")

    def run_row(item: dict[str, Any]) -> Markup:
        """One row of the runs list, rendered once per what it shows (see `_ROW_CACHE_ITEMS`)."""
        key = _row_key(item)
        found = rows.get(key)
        if found is None:
            found = Markup(row_template.render(item=item, url=_url))  # noqa: S704 - autoescaped
            rows.put(key, found)
        return found

    env.globals["run_row"] = run_row
    env.globals["timeline_rows"] = timeline_rows

    def reader(request: Request) -> tuple[bool, str | None]:
        """What of a page depends on who reads it (the CSRF token is the app's, the same
        for every reader)."""
        return _has_token(request, config.token), _identity(request, config)

    def text(request: Request, name: str, **context: Any) -> str:
        return env.get_template(name).render(
            request=request, read_only=config.read_only, csrf=csrf, poll=config.poll_seconds,
            signed_in=_has_token(request, config.token), source=source.label, url=_url,
            identity=_identity(request, config), live=live.tick > 0, **context,
        )  # fmt: skip

    def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return HTMLResponse(text(request, name, **context), status_code=status)

    def list_query(request: Request) -> dict[str, Any]:
        """The runs list's parameters, read from its address (the page's and its stream's)."""
        q = request.query_params
        return {
            "status": q.getlist("status"), "table": q.get("table") or None,
            "search": q.get("q") or None, "after": q.get("after") or None,
            "limit": config.page_size, "text": (q.get("text") or "")[:200] or None,
            "since": _day(request, "since"), "until": _day(request, "until"),
            "trail": q.getlist("trail"), "sort": _sort(request),
            "count_up_to": config.count_up_to,
        }  # fmt: skip

    async def runs(request: Request) -> Response:
        q = request.query_params
        query = list_query(request)
        fragment = q.get("fragment") == "rows"

        def answer() -> bytes:
            try:
                data = _pages.runs_page(source, **query, counts=not fragment)
            except ValueError as exc:  # a cursor naming no run: the store says which
                raise HTTPException(400, str(exc)) from None
            # The page is drawn from these and from the address alone (the tables known and
            # a log's problems with them): what the store said is read each time, the
            # drawing of it is done once.
            key = (
                "runs", request.url.query, fragment, reader(request),
                tuple(_row_key(item) for item in data["rows"]), data["page"].next_after,
                data["page"].scanned, data["page"].order, tuple(data["statuses"]),
                tuple((c["status"], c["count"]) for c in data["counts"]), data["total"],
                tuple(data["table_names"]),
            )  # fmt: skip
            found = pages.get(key)
            if found is not None:
                return found
            if fragment:
                body = text(request, "_run_rows.html", **data).encode()
            else:
                problems = getattr(source, "problems", ())
                body = text(request, "runs.html", problems=problems[:MAX_LISTED],
                            problems_more=len(problems) - MAX_LISTED, **data).encode()  # fmt: skip
            pages.put(key, body)
            return body

        return HTMLResponse(await run_in_threadpool(answer))

    async def run(request: Request) -> Response:
        run_id = _required(request, "id")
        page = _number(request, "page")
        at = _number(request, "at")
        actions_page = _number(request, "actions_page")
        whole = request.query_params.get("view") == "table"
        compare = _number(request, "since")

        def answer() -> bytes:
            info = source.info(run_id)  # RunNotFoundError: a 404
            around = (source.children(run_id), source.parent(run_id))
            key = (
                "run", run_id, info.version, info.updated_at, page, at, actions_page, whole,
                compare, tuple((c.run_id, c.status) for c in around[0]), around[1],
                reader(request),
            )  # fmt: skip
            found = pages.get(key)
            if found is not None:
                return found
            data = _pages.run_page(source, run_id, page, at, actions_page, whole, compare, around)
            body = text(request, "run.html", **data).encode()
            # Kept only if every read saw version V: versions only grow, so a run that is
            # still at V after the page was read was at V for each of its reads.
            if data["record"].version == info.version == source.info(run_id).version:
                pages.put(key, body)
            return body

        return HTMLResponse(await run_in_threadpool(answer))

    async def run_record(request: Request) -> Response:
        run_id = _required(request, "id")
        at = _number(request, "at")
        after = request.query_params.get("actions_after") or None
        if at is None:
            record = await run_in_threadpool(source.record, run_id)
        else:
            record = await run_in_threadpool(source.record_at, run_id, max(at, 1))
        if after is not None and after not in record.actions:
            raise HTTPException(404, f"run '{run_id}' has no call '{after}'")

        def next_url(last: str) -> str:
            return _url("/run/record.json", id=run_id, at=at, actions_after=last)

        return JSONResponse(_pages.record_json(record, after, next_url))

    async def run_action(request: Request) -> Response:
        run_id, action_id = _required(request, "id"), _required(request, "action")
        record = await run_in_threadpool(source.record, run_id)
        action = record.actions.get(action_id)
        if action is None:
            raise HTTPException(404, f"run '{run_id}' has no call '{action_id}'")
        return JSONResponse(action.to_json())

    async def run_event(request: Request) -> Response:
        run_id = _required(request, "id")
        sequence = _number(request, "seq")
        if not sequence:
            raise HTTPException(400, "the address needs ?seq= (1 or more)")
        event = await run_in_threadpool(source.event, run_id, sequence)
        if event is None:
            raise HTTPException(404, f"run '{run_id}' has no event {sequence}")
        return JSONResponse(event_to_dict(event))

    async def run_version(request: Request) -> Response:
        info = await run_in_threadpool(source.info, _required(request, "id"))
        return JSONResponse({"version": info.version, "status": info.status})

    async def approvals(request: Request) -> Response:
        q = request.query_params
        after, call = q.get("after") or None, q.get("call") or None

        def answer() -> bytes:
            inbox = source.pending(after, call)
            runs = dict.fromkeys(c.record.run_id for c in inbox.calls)
            parents = {r: source.parent(r) for r in runs}
            # A section is drawn from its run's record at that version, and from events
            # before it (append-only), so the calls' runs and versions say what the page is.
            key = (
                "approvals", after, call, q.get("after"), q.get("call"),
                tuple((c.record.run_id, c.record.version, c.action_id, c.table)
                      for c in inbox.calls),
                inbox.next_run, inbox.next_call, tuple(parents.items()), reader(request),
            )  # fmt: skip
            found = pages.get(key)
            if found is not None:
                return found
            data = _pages.approvals_page(source, after, call, inbox, parents)
            body = text(request, "approvals.html", **data).encode()
            pages.put(key, body)
            return body

        return HTMLResponse(await run_in_threadpool(answer))

    async def approvals_count(request: Request) -> Response:
        # The same page the reader has open (the same cursor), so the answer is one page's
        # keys whatever the inbox holds.
        q = request.query_params
        page = await run_in_threadpool(
            source.pending, q.get("after") or None, q.get("call") or None
        )
        keys = sorted(f"{c.record.run_id} {c.action_id}" for c in page.calls)
        return JSONResponse({"count": len(keys), "calls": keys})

    def opened(request: Request, feed: Step) -> Response:
        """The stream of `feed`, if this server keeps one more open (see `_live`)."""
        if live.tick <= 0:
            raise HTTPException(404, "live streams are off on this server: the pages poll")
        origin = request.headers.get("origin")
        if origin is not None and origin != _origin(request):
            raise HTTPException(403, "a live stream is only for this server's own pages")
        refused = streams.take()
        if refused is not None:
            return PlainTextResponse(
                f"{refused}: the page polls instead", 503, headers={"retry-after": "30"}
            )
        return StreamResponse(streams, stream(streams, live, feed))

    def renderer(request: Request) -> Callable[..., str]:
        return lambda name, **context: text(request, name, **context)

    async def run_stream(request: Request) -> Response:
        run_id = _required(request, "id")
        after, until = _number(request, "after") or 0, _number(request, "until") or 0
        resumed = request.headers.get("last-event-id", "")
        if resumed.isdigit() and len(resumed) <= 12:  # a reconnect: on from the last shown
            after = max(after, int(resumed))
        await run_in_threadpool(source.info, run_id)  # RunNotFoundError: a 404
        whole = request.query_params.get("view") == "table"
        return opened(request, RunFeed(source, renderer(request), run_id, after, until, whole))

    async def runs_stream(request: Request) -> Response:
        return opened(request, ListFeed(source, renderer(request), list_query(request)))

    async def approvals_stream(request: Request) -> Response:
        q = request.query_params
        feed = InboxFeed(source, renderer(request), q.get("after") or None, q.get("call") or None)
        return opened(request, feed)

    async def diff(request: Request) -> Response:
        a, b = _required(request, "a"), _required(request, "b")
        data = await run_in_threadpool(_pages.diff_page, source, a, b)
        return render(request, "diff.html", **data)

    async def tables(request: Request) -> Response:
        return render(request, "tables.html", tables=source.tables())

    async def table(request: Request) -> Response:
        found = source.table(_required(request, "digest"))
        if found is None:
            raise HTTPException(404, "no table with that digest is known here")

        def answer() -> bytes:
            # A table is what its digest says: its page is drawn once per reader.
            key = ("table", found.digest, reader(request))
            kept = pages.get(key)
            if kept is None:
                kept = text(request, "table.html", **_pages.table_page(found)).encode()
                pages.put(key, kept)
            return kept

        return HTMLResponse(await run_in_threadpool(answer))

    async def login(request: Request) -> Response:
        if request.method == "POST":
            given = (await request.form()).get("token")
        else:
            given = request.query_params.get("token")
        if given is None:
            return render(request, "login.html")
        if not isinstance(given, str) or not same_secret(given, config.token):
            return render(request, "login.html", 403, wrong=True)
        # The token leaves the address bar at once (history, screenshots), into a cookie
        # no script can read and no other site's page sends.
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, config.token, httponly=True, samesite="strict", path="/")
        return response

    def mutation(act: Callable[[Request, dict[str, str]], Awaitable[Response]]) -> Any:
        async def endpoint(request: Request) -> Response:
            if not _has_token(request, config.token):
                raise HTTPException(
                    403,
                    "this action needs the UI's token: open the URL "
                    "`agentfsm ui` printed, or sign in with the token",
                )
            origin = request.headers.get("origin")
            if origin is not None and origin != _origin(request):
                raise HTTPException(403, "the request came from another site's page")
            form = await request.form()
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
            if not same_secret(fields.get("csrf"), csrf):
                raise HTTPException(
                    403, "the form's CSRF token is missing or wrong: reload the page and try again"
                )
            if config.identity_header is not None:
                who = _identity(request, config)
                if who is None:
                    raise HTTPException(
                        403,
                        f"this deployment names who decides from the request header "
                        f"'{config.identity_header}', and this request had none: sign in "
                        "through the deployment's proxy",
                    )
                # The proxy's name, whatever the form said: a person cannot decide as another.
                fields = {**fields, "approver": who, "requested_by": who, "by": who}
            return await act(request, fields)

        return endpoint

    async def steer(
        request: Request, fields: dict[str, str], what: str,
        do: Callable[[EventStore, str], RunRecord],
    ) -> Response:  # fmt: skip
        run_id = _field(fields, "run_id")

        def perform() -> RunRecord:
            try:
                return source.use(run_id, lambda store: do(store, run_id))
            finally:
                source.forget(run_id)

        try:
            record = await run_in_threadpool(perform)
        except (LifecycleError, RunHeldError, _RefusedError) as exc:  # held: a live driver
            notes = list(getattr(exc, "__notes__", ()))
            return render(request, "done.html", 409, ok=False, what=what, run_id=run_id,
                          message=str(exc), notes=notes)  # fmt: skip
        # Who goes on with the run now: its lease's live holder, if a driver holds it.
        holder = await run_in_threadpool(source.use, run_id, lambda s: s.holder(run_id))
        table = source.table_of(run_id)
        return render(request, "done.html", ok=True, what=what, run_id=run_id, record=record,
                      holder=holder, ended=table.is_terminal(record.status),
                      kind=str(table.kind(record.status)))  # fmt: skip

    async def approve(request: Request, fields: dict[str, str]) -> Response:
        action_id, digest = _field(fields, "action_id"), _field(fields, "digest")
        approver = _field(fields, "approver")
        reason = _field(fields, "reason", required=False)

        def do(store: EventStore, run_id: str) -> RunRecord:
            _check_call(store, run_id, action_id, digest, approving=True)
            return control.approve(store, run_id, action_id, approver, digest=digest, reason=reason)

        return await steer(request, fields, f"approve call '{action_id}'", do)

    async def reject(request: Request, fields: dict[str, str]) -> Response:
        action_id, digest = _field(fields, "action_id"), _field(fields, "digest")
        approver = _field(fields, "approver")
        reason = _field(fields, "reason", required=False)

        def do(store: EventStore, run_id: str) -> RunRecord:
            _check_call(store, run_id, action_id, digest, approving=False)
            return control.reject(store, run_id, action_id, approver, reason, digest=digest)

        return await steer(request, fields, f"reject call '{action_id}'", do)

    async def cancel(request: Request, fields: dict[str, str]) -> Response:
        reason = _field(fields, "reason", required=False)
        who = _field(fields, "requested_by", required=False)
        return await steer(
            request, fields, "cancel the run",
            lambda s, r: control.cancel(s, r, reason=reason, requested_by=who),
        )  # fmt: skip

    async def pause(request: Request, fields: dict[str, str]) -> Response:
        reason = _field(fields, "reason")
        return await steer(
            request, fields, "pause the run", lambda s, r: control.pause(s, r, reason)
        )

    async def resume(request: Request, fields: dict[str, str]) -> Response:
        return await steer(request, fields, "resume the run", control.resume)

    async def fork(request: Request, fields: dict[str, str]) -> Response:
        run_id, as_run = _field(fields, "run_id"), _field(fields, "as_run")
        at, pin = _field(fields, "at"), _field(fields, "pin")
        by, reason = _field(fields, "by", required=False), _field(fields, "reason", required=False)
        if not at.isdigit() or len(at) > 12:
            raise HTTPException(400, "the form field 'at' must be a positive whole number")
        sequence = int(at)

        def perform(store: EventStore) -> RunRecord:
            shown = next(iter(store.events(run_id, after=sequence - 1)), None)
            if shown is None or shown.sequence != sequence or _pages.event_pin(shown) != pin:
                raise _RefusedError(
                    f"event {sequence} of run '{run_id}' is not the one this page showed; "
                    "reload the run and fork again"
                )
            return control.fork(store, run_id, at=sequence, as_run=as_run, by=by, reason=reason)

        what = f"fork run '{run_id}' at event {sequence} as '{as_run}'"
        try:
            record = await run_in_threadpool(source.use, run_id, perform)
        except (LifecycleError, ValueError, _RefusedError) as exc:
            return render(request, "done.html", 409, ok=False, what=what, run_id=run_id,
                          message=str(exc), notes=[])  # fmt: skip
        return render(request, "done.html", ok=True, what=what, run_id=as_run, record=record,
                      compare=(run_id, as_run))  # fmt: skip

    async def favicon(request: Request) -> Response:
        # Browsers ask for /favicon.ico whatever the page links: the same icon, no 404.
        return RedirectResponse("/static/favicon.svg", status_code=301)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        titles = {400: "Bad request", 403: "Refused", 404: "Not found", 405: "Not allowed"}
        return render(request, "error.html", exc.status_code,
                      title=titles.get(exc.status_code, "Error"), message=exc.detail)  # fmt: skip

    async def not_found(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", 404, title="Not found", message=str(exc))

    async def library_error(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", 422, title="Cannot show this", message=str(exc))

    async def server_error(request: Request, exc: Exception) -> Response:
        _log.error("ui.error path=%s error=%s: %s", request.url.path, type(exc).__name__, exc)
        message = f"unexpected {type(exc).__name__}; the server's log has the details"
        return render(request, "error.html", 500, title="Something went wrong", message=message)

    routes = [
        Route("/", runs),
        Route("/run", run),
        Route("/run/record.json", run_record),
        Route("/run/action.json", run_action),
        Route("/run/event.json", run_event),
        Route("/run/version", run_version),
        Route("/run/stream", run_stream),
        Route("/runs/stream", runs_stream),
        Route("/approvals/stream", approvals_stream),
        Route("/approvals", approvals),
        Route("/approvals/count", approvals_count),
        Route("/diff", diff),
        Route("/tables", tables),
        Route("/table", table),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/favicon.ico", favicon),
        Mount(
            "/static", StaticFiles(directory=str(files("agentfsm.ui") / "static")), name="static"
        ),
    ]
    if not config.read_only:
        routes += [
            Route("/act/approve", mutation(approve), methods=["POST"]),
            Route("/act/reject", mutation(reject), methods=["POST"]),
            Route("/act/cancel", mutation(cancel), methods=["POST"]),
            Route("/act/pause", mutation(pause), methods=["POST"]),
            Route("/act/resume", mutation(resume), methods=["POST"]),
            Route("/act/fork", mutation(fork), methods=["POST"]),
        ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # The store handles the source opened (a PostgreSQL connection each) go with the
        # app, for whoever serves it with a lifespan (`agentfsm ui` also closes them).
        try:
            yield
        finally:
            source.close()

    app = Starlette(
        debug=False,
        routes=routes,
        lifespan=lifespan,
        middleware=[
            Middleware(_Headers),
            Middleware(TrustedHostMiddleware, allowed_hosts=list(config.allowed_hosts)),
        ],
        exception_handlers={
            HTTPException: http_error,
            RunNotFoundError: not_found,
            UnknownRunTableError: library_error,
            AgentFSMError: library_error,
            Exception: server_error,
        },
    )
    app.state.source = source
    app.state.streams = streams
    app.state.pages = pages
    app.state.rows = rows
    return app


class _RefusedError(Exception):
    """The UI refuses a decision before asking the library (stale call, expired approval)."""


def _check_call(
    store: EventStore, run_id: str, action_id: str, digest: str, *, approving: bool
) -> None:
    """The rules `agentfsm approve|reject` applies: the call must still be the one reviewed
    (same digest), and an approval must not have expired. A call that no longer waits is
    left to the library, whose refusal says more."""
    action = store.load(run_id).actions.get(action_id)
    if action is None or action.status != ActionStatus.APPROVAL_PENDING:
        return
    where = f"call '{action_id}' of run '{run_id}'"
    if action.arguments_digest != digest:
        raise _RefusedError(
            f"{where} is not the call reviewed: it has digest {action.arguments_digest}, "
            f"not {digest}; review it again"
        )
    expires = action.expires_at
    if approving and expires is not None and datetime.now(UTC) > parse_timestamp(expires):
        raise _RefusedError(f"approval of {where} expired at {expires}")


def _row_key(item: dict[str, Any]) -> tuple[Any, ...]:
    """What a row of the runs list is drawn from: its index row, its record's version (a
    record at a version never changes), its table, where it stands and who drives it."""
    row = item["row"]
    info, record = row.info, row.record
    return (
        info.run_id, info.status, info.version, info.updated_at,
        record.version if record is not None else None, row.table, row.problem,
        item["words"], item["driver"],
    )  # fmt: skip


def _has_token(request: Request, token: str) -> bool:
    auth = request.headers.get("authorization", "")
    bearer = auth[7:] if auth.lower().startswith("bearer ") else None
    return same_secret(request.cookies.get(COOKIE), token) or same_secret(bearer, token)


def _identity(request: Request, config: UIConfig) -> str | None:
    """The signed-in person the deployment's proxy names, if it is configured to."""
    if config.identity_header is None:
        return None
    value = request.headers.get(config.identity_header, "").strip()
    return value[:200] or None


def _origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', '')}"


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise HTTPException(400, f"the address needs ?{name}=")
    return value


def _number(request: Request, name: str) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return None
    if not value.isdigit() or len(value) > 12:
        raise HTTPException(400, f"?{name}= must be a positive whole number")
    return int(value)


def _sort(request: Request) -> RunOrder:
    """The runs list's `?sort=`: newest first unless asked, or, searching by a run id's
    start, by run id (the index reads that range directly)."""
    value = request.query_params.get("sort") or (
        "run_id" if request.query_params.get("q") else "newest"
    )
    if value not in _pages.SORTS:
        raise HTTPException(400, f"?sort= must be one of {', '.join(_pages.SORTS)}")
    return value  # type: ignore[return-value]


def _day(request: Request, name: str) -> str | None:
    value = request.query_params.get(name) or None
    if value is not None:
        try:
            datetime.strptime(value, "%Y-%m-%d")
        except ValueError:
            raise HTTPException(400, f"?{name}= must be a date, YYYY-MM-DD") from None
    return value


def _field(fields: dict[str, str], name: str, *, required: bool = True) -> Any:
    value = fields.get(name, "")
    if "\0" in value or len(value) > _MAX_FIELD:
        raise HTTPException(400, f"the form field '{name}' is not acceptable text")
    if not value.strip():
        if required:
            raise HTTPException(400, f"the form needs '{name}'")
        return None
    return value


def _url(path: str, **params: Any) -> str:
    """`path?params` with each value encoded (lists repeat the name); None values left out."""
    pairs: list[tuple[str, Any]] = []
    for name, value in params.items():
        if value is None or value == "":
            continue
        if isinstance(value, list | tuple):
            pairs += [(name, v) for v in value]
        else:
            pairs.append((name, value))
    return f"{path}?{urlencode(pairs)}" if pairs else path
