"""Live pages and the runs list's order in a real browser (issue 29, items 3 and 4): headless
Chromium on a server on 127.0.0.1, events appended by the test through a store handle of its
own while the page is open; nothing reloads the page (a mark set in it survives).

Screenshots: build/ui-screenshots/runs-sorted.png, run-live.png, runs-live.png,
approvals-live.png.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from agentfsm import Runner, SQLiteEventStore
from agentfsm.runtime import control
from agentfsm.ui import LiveConfig
from tests.ui.conftest import TOKEN, LiveServer, answer_agent, refund_agent, screenshot

pytestmark = pytest.mark.browser

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI=true, fails) saying why
    expect = None

#: A look at the store every 100 ms per stream: the pages follow within a few of them.
LIVE = LiveConfig(tick=0.1)


@pytest.fixture
def live(runs_db: Path) -> Iterator[LiveServer]:
    """The app over `runs_db`, its pages kept live by streams (polling every 30 s, so an
    update within seconds came by the stream)."""
    server = LiveServer(runs_db, live=LIVE, poll_seconds=30)
    yield server
    server.stop()


def _sign_in(page: Any, live: LiveServer) -> None:
    page.goto(f"{live.url}/login?token={TOKEN}")


def _mark(page: Any) -> None:
    """Set a mark in the page: a reload would lose it."""
    page.evaluate("window.__notReloaded = true")


def _not_reloaded(page: Any) -> None:
    assert page.evaluate("window.__notReloaded === true")


def _requests(page: Any) -> list[str]:
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url))
    return seen


def _finish_pay_1(path: Path) -> None:
    with SQLiteEventStore(path) as store:
        control.approve(store, "pay-1", "t1.1", "bob")
    with structlog.testing.capture_logs(), SQLiteEventStore(path) as store:
        Runner(store, refund_agent()).drive("pay-1")


def _run(path: Path, run_id: str, agent: Any, objective: str) -> None:
    with structlog.testing.capture_logs(), SQLiteEventStore(path) as store:
        Runner(store, agent).run(run_id, objective)


def _ids(page: Any) -> list[str]:
    return [r.get_attribute("data-run") for r in page.locator("#run-rows tr[data-run]").all()]


class TestTheRunsListsOrder:
    def test_newest_first_sortable_and_paged_with_the_sort_kept(
        self, page: Any, live: LiveServer, runs_db: Path
    ) -> None:
        """The list opens newest first with its total; the Sort control reorders it; the
        next page keeps the sort and the status filter."""
        _run(runs_db, "aaa-4", answer_agent("late"), "Made last")
        page.goto(live.url)
        assert _ids(page) == ["aaa-4", "pay-1", "done-2", "done-1"]
        expect(page.locator("#runs-total")).to_have_text("4 runs in all · newest first")
        screenshot(page, "runs-sorted")
        page.select_option('select[name="sort"]', "oldest")
        with page.expect_navigation():
            page.click('form.filters button[type="submit"]')
        assert _ids(page) == ["done-1", "done-2", "pay-1", "aaa-4"]
        small = LiveServer(runs_db, live=LIVE, page_size=2)
        try:
            page.goto(f"{small.url}/?sort=oldest&status=completed")
            assert _ids(page) == ["done-1", "done-2"]
            with page.expect_navigation():
                page.click('a[rel="next"]')
            assert _ids(page) == ["aaa-4"]
            assert page.locator('select[name="sort"]').input_value() == "oldest"
        finally:
            small.stop()


class TestLivePages:
    def test_a_run_pages_timeline_gains_the_new_events_rows_in_place(
        self, page: Any, live: LiveServer, runs_db: Path
    ) -> None:
        """While the run page is open, the run is approved and finished from another store
        handle: the new events' rows appear in the timeline, the status and event count
        follow, a row opened before stays open, and the page never reloads (nor polls)."""
        asked = _requests(page)
        page.goto(f"{live.url}/run?id=pay-1")
        expect(page.locator("body")).to_have_attribute("data-live", "stream")
        page.locator('tr[data-seq="3"] details summary').click()
        _mark(page)
        assert page.locator("tr[data-seq]").count() == 4
        _finish_pay_1(runs_db)
        expect(page.locator('tr[data-seq="11"]')).to_be_visible(timeout=10_000)
        expect(page.locator("#run-status")).to_have_text("completed")
        expect(page.locator("#run-events")).to_have_text("11")
        expect(page.locator("#timeline-range")).to_have_text("events 1–11 of 11")
        expect(page.locator("#run-live")).to_be_visible()
        expect(page.locator("section.steer button.stop")).to_be_disabled()  # no longer offered
        assert page.locator('tr[data-seq="3"] details').get_attribute("open") is not None
        assert page.locator("tr[data-seq]").count() == 11
        _not_reloaded(page)
        assert not [u for u in asked if "/run/version" in u]
        assert page.evaluate("typeof window.__xss") == "undefined"
        screenshot(page, "run-live")

    def test_the_runs_list_updates_its_rows_in_place(
        self, page: Any, live: LiveServer, runs_db: Path
    ) -> None:
        """A run started while the list is open comes first; a run that finishes shows its
        new status and the counts follow; no reload."""
        page.goto(live.url)
        expect(page.locator("body")).to_have_attribute("data-live", "stream")
        _mark(page)
        _run(runs_db, "zz-new", answer_agent("new"), "A new run")
        expect(page.locator("#run-rows tr").first).to_have_attribute("data-run", "zz-new", timeout=10_000)
        _finish_pay_1(runs_db)
        status = page.locator('tr[data-run="pay-1"] .status')
        expect(status).to_have_text("completed", timeout=10_000)
        expect(page.locator("#runs-total")).to_have_text("4 runs in all · newest first", timeout=10_000)
        expect(page.locator(".counts")).to_contain_text("completed 4")
        expect(page.locator("#run-pager")).to_have_text("4 shown, 4 read from the index")
        _not_reloaded(page)
        screenshot(page, "runs-live")

    def test_the_inbox_adds_calls_that_come_and_marks_those_decided(
        self, page: Any, live: LiveServer, runs_db: Path
    ) -> None:
        """A new run waiting for approval adds its call, with working forms; a call decided
        elsewhere is marked no longer waiting, its buttons off; no reload."""
        _sign_in(page, live)
        page.goto(f"{live.url}/approvals")
        expect(page.locator("body")).to_have_attribute("data-live", "stream")
        _mark(page)
        _run(runs_db, "pay-2", refund_agent(), "Refund order O-2")
        card = page.locator('article.approval[data-run="pay-2"]')
        expect(card).to_be_visible(timeout=10_000)
        _finish_pay_1(runs_db)
        gone = page.locator('article.approval[data-run="pay-1"]')
        expect(gone).to_have_class("approval gone", timeout=10_000)
        expect(gone.locator("button.go")).to_be_disabled()
        expect(gone.locator(".gone-note")).to_have_text(
            "No longer waiting: decided, or the run moved on, since this page loaded."
        )
        _not_reloaded(page)
        screenshot(page, "approvals-live")
        card.locator('form.approve input[name="approver"]').fill("carol")
        with page.expect_navigation():
            card.locator("form.approve button").click()
        assert "approve call" in page.locator("h1").inner_text()


class TestTheFallback:
    def test_without_eventsource_the_list_polls(self, browser: Any, runs_db: Path) -> None:
        """A browser without EventSource polls as before, and still sees the run finish."""
        server = LiveServer(runs_db, live=LIVE, poll_seconds=0.3)
        context = browser.new_context()
        context.add_init_script("delete window.EventSource")
        page = context.new_page()
        try:
            page.goto(server.url)
            expect(page.locator("body")).to_have_attribute("data-live", "poll")
            _finish_pay_1(runs_db)
            expect(page.locator('tr[data-run="pay-1"] .status')).to_have_text("completed", timeout=10_000)
        finally:
            context.close()
            server.stop()

    def test_a_stream_refused_past_the_cap_falls_back_to_polling(
        self, page: Any, runs_db: Path
    ) -> None:
        """With no stream to spare (cap 0) the server answers 503; the page polls."""
        server = LiveServer(runs_db, live=LiveConfig(tick=0.1, max_streams=0), poll_seconds=0.3)
        try:
            page.goto(f"{server.url}/run?id=pay-1")
            expect(page.locator("body")).to_have_attribute("data-live", "poll", timeout=10_000)
            _finish_pay_1(runs_db)
            expect(page.locator("#run-changed")).to_be_visible(timeout=10_000)
        finally:
            server.stop()
