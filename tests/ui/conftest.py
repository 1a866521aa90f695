"""Fixtures for the UI's tests: stores of runs a Runner made, the app, a live server, a browser.

The browser tests drive Debian's Chromium (`/usr/bin/chromium`) through Playwright, with no
browser download. Without it they skip, saying how to install it; under `CI=true` they fail,
like the project's other real-tool tests.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
import uvicorn
from starlette.testclient import TestClient

from agentfsm import Agent, Decision, ProposedCall, Runner, ScriptedModel, SQLiteEventStore, Tool
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import RunnerConfig, ToolPolicy
from agentfsm.stores.base import EventStore, StoreOptions
from agentfsm.ui import Source, UIConfig, create_app
from agentfsm.ui._security import COOKIE, csrf_token
from agentfsm.ui._server import Server, bind
from agentfsm.ui._source import READERS

CHROMIUM = "/usr/bin/chromium"
TOKEN = "test-token-0123456789abcdef"
CSRF = csrf_token(TOKEN)
#: Where screenshots of each page go (git-ignored; CI can keep them as artifacts).
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "ui-screenshots"

#: A tool argument that would run script if any page put it in as markup.
XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'


def refund_agent() -> Agent:
    """An agent whose one call (`refund`) needs approval, then answers from its result."""
    model = ScriptedModel(
        [
            Decision.call_tools(
                ProposedCall("refund", {"order": "O-1", "amount": 40, "note": XSS})
            ),
            lambda ctx: Decision.answer(f"Refund is {ctx.results[0].result['status']}."),
        ],
        by_turn=True,
    )
    refund = Tool("refund", lambda ctx: {"status": "done"}, idempotent=True)
    return Agent("payments", model, [refund], policy=ToolPolicy(approval={"refund"}))


def batch_agent(calls: int, tool: str = "refund") -> Agent:
    """An agent whose one decision proposes `calls` calls of `tool`, each needing approval."""
    batch = [ProposedCall(tool, {"order": f"O-{i}", "amount": i}) for i in range(calls)]
    model = ScriptedModel([Decision.call_tools(*batch)], by_turn=True)
    refund = Tool(tool, lambda ctx: {"status": "done"}, idempotent=True)
    return Agent("payments", model, [refund], policy=ToolPolicy(approval={tool}))


def make_batch(path: Path, calls: int, run_id: str = "batch") -> None:
    """A run, made by a Runner on the SQLite store at `path`, waiting on `calls` calls of
    one decision that each need approval (issue 25's attack on the inbox).

    The calls-per-decision cap is lifted: a Runner refuses such a decision by default, but a
    store may hold one all the same (written before the cap, or by a writer that lifted
    it), and the pages must stay bounded then too."""
    uncapped = RunnerConfig(max_calls_per_decision=None)
    with structlog.testing.capture_logs(), SQLiteEventStore(path) as store:
        Runner(store, batch_agent(calls), config=uncapped).run(run_id, "Refund every order")


def answer_agent(text: str) -> Agent:
    """An agent that answers at once."""
    return Agent("helper", ScriptedModel([Decision.answer(text)], by_turn=True), [])


def make_runs(path: Path) -> None:
    """Runs a Runner made on the SQLite store at `path`: two completed, one waiting for the
    approval of a call whose arguments hold an XSS payload."""
    with structlog.testing.capture_logs(), SQLiteEventStore(path) as store:
        Runner(store, answer_agent("hello")).run("done-1", "Say hello")
        Runner(store, answer_agent("bye")).run("done-2", "Say bye")
        Runner(store, refund_agent()).run("pay-1", f"Refund order O-1 {XSS}")


@pytest.fixture
def runs_db(tmp_path: Path) -> Path:
    """A SQLite store of runs made by a Runner (see `make_runs`)."""
    path = tmp_path / "runs.db"
    make_runs(path)
    return path


def opener(path: Path) -> Callable[[TransitionTable], EventStore]:
    """Opens handles on the SQLite store at `path` for a table."""
    return lambda table: SQLiteEventStore(path, options=StoreOptions(reducer=Reducer(table)))


def client(path: Path, **config: Any) -> TestClient:
    """A TestClient over the app serving the store at `path`."""
    settings = {"token": TOKEN, "allowed_hosts": ("testserver",), **config}
    app = create_app(Source(opener(path), label=str(path)), UIConfig(**settings))
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture
def ui(runs_db: Path) -> TestClient:
    """A client of the app over `runs_db`, not signed in."""
    return client(runs_db)


@pytest.fixture
def signed_in(runs_db: Path) -> TestClient:
    """A client of the app over `runs_db`, holding the token cookie."""
    c = client(runs_db)
    c.cookies.set(COOKIE, TOKEN)
    return c


class LiveServer:
    """The app served by uvicorn on 127.0.0.1, in a thread of the test process."""

    def __init__(self, path: Path, *, readers: int = READERS, **config: Any) -> None:
        settings = {"token": TOKEN, "poll_seconds": 0.5, **config}
        source = Source(opener(path), label=str(path), readers=readers)
        self.app = create_app(source, UIConfig(**settings))
        sock = bind("127.0.0.1", 0)
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = Server(
            uvicorn.Config(self.app, log_level="warning", access_log=False, lifespan="off"),
            self.app,
        )
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]})
        self.sock = sock
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the UI server did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


@pytest.fixture
def live(runs_db: Path) -> Iterator[LiveServer]:
    """The app over `runs_db`, served on 127.0.0.1 at a free port."""
    server = LiveServer(runs_db)
    yield server
    server.stop()


def _browser_unavailable() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright is not installed: pip install -e '.[dev]'"
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        return "Chromium is not installed: apt-get install --no-install-recommends chromium"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium (Debian's), driven by Playwright; no browser is downloaded.

    Per module, not per session: Playwright's sync API keeps an event loop running in the
    main thread while it is open, and every later test's `asyncio.run` would be refused.
    """
    reason = _browser_unavailable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true, so the browser tests must run: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser page (its own cookies); fails the test on any script error."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    yield tab
    context.close()
    assert errors == []


def screenshot(page: Any, name: str) -> None:
    """Save the page as build/ui-screenshots/NAME.png (a test artifact)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def reasoned_agent() -> Agent:
    """An agent that looks an order up (no approval), then proposes a refund with its
    reasoning text; the refund needs approval within an hour."""
    from datetime import timedelta

    model = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("lookup", {"order": "O-7"})),
            Decision.call_tools(
                ProposedCall("refund", {"order": "O-7", "amount": 12}),
                output="The parcel never arrived (tracking says lost), so a refund is due.",
            ),
            Decision.answer("Refunded."),
        ],
        by_turn=True,
    )
    tools = [
        Tool("lookup", lambda ctx: {"order": "O-7", "tracking": "lost"}, idempotent=True),
        Tool("refund", lambda ctx: {"status": "done"}, idempotent=True),
    ]
    policy = ToolPolicy(approval={"refund"}, expires_in=timedelta(hours=1))
    return Agent("payments", model, tools, policy=policy)


def make_reasoned(path: Path, run_id: str = "why-1") -> None:
    """A run of `reasoned_agent` on the SQLite store at `path`, waiting for its refund."""
    with structlog.testing.capture_logs(), SQLiteEventStore(path) as store:
        Runner(store, reasoned_agent()).run(run_id, "Refund a lost parcel")
