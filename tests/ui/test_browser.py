"""The UI in a real browser: headless Chromium, a server on 127.0.0.1, runs a Runner made.

Each page is also saved as a screenshot under build/ui-screenshots/ (a test artifact).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import structlog

from agentfsm import Runner, SQLiteEventStore
from agentfsm.events import dump_event
from agentfsm.runtime import control
from agentfsm.ui import render_report
from agentfsm.ui._source import CALLS_PER_PAGE
from tests.ui.conftest import TOKEN, LiveServer, make_batch, refund_agent, screenshot

pytestmark = pytest.mark.browser

try:
    from playwright.sync_api import expect
except ImportError:  # the `browser` fixture skips (or, under CI=true, fails) saying why
    expect = None


def _sign_in(page: Any, live: LiveServer) -> None:
    page.goto(f"{live.url}/login?token={TOKEN}")
    assert page.url == f"{live.url}/"


def _no_script_ran(page: Any) -> None:
    assert page.evaluate("typeof window.__xss") == "undefined"


class TestPages:
    def test_runs_list_shows_the_runs_a_runner_made(self, page: Any, live: LiveServer) -> None:
        """The list shows each run with its status; a click opens the run."""
        page.goto(live.url)
        rows = page.locator("#run-rows tr")
        assert rows.count() == 3
        assert page.locator('tr[data-run="pay-1"] .status').inner_text() == "waiting_approval"
        assert page.locator('tr[data-run="done-1"] .status').inner_text() == "completed"
        screenshot(page, "runs")
        page.click('a:text-is("done-1")')
        assert page.locator("h1 code").inner_text() == "done-1"

    def test_runs_list_updates_as_runs_progress(self, page: Any, live: LiveServer, runs_db: Path) -> None:
        """A run that finishes while the list is open shows its new status by itself."""
        page.goto(live.url)
        with SQLiteEventStore(runs_db) as store:
            control.approve(store, "pay-1", "t1.1", "bob")
        with structlog.testing.capture_logs(), SQLiteEventStore(runs_db) as store:
            Runner(store, refund_agent()).drive("pay-1")
        status = page.locator('tr[data-run="pay-1"] .status')
        status.filter(has_text="completed").wait_for(timeout=5000)

    def test_run_page_steps_through_the_path(self, page: Any, live: LiveServer) -> None:
        """Selecting an event shows the state there and marks it on the diagram."""
        page.goto(f"{live.url}/run?id=pay-1")
        assert page.locator("svg.diagram g.node.current").get_attribute("data-state") == "waiting_approval"
        screenshot(page, "run")
        with page.expect_navigation():
            page.click('tr[data-seq="2"] a')
        expect(page.locator(".state-at")).to_have_text("running")
        expect(page.locator("svg.diagram g.node.current")).to_have_attribute("data-state", "running")
        with page.expect_navigation():
            page.keyboard.press("ArrowRight")
        expect(page.locator("tr.at")).to_have_attribute("data-seq", "3")
        screenshot(page, "run-step")

    def test_table_page_states_are_clickable(self, page: Any, live: LiveServer) -> None:
        """A click on a state in the diagram opens its moves below."""
        page.goto(f"{live.url}/tables")
        page.click('a:text-is("agent_run")')
        page.click('svg.diagram g.node[data-state="waiting_approval"]')
        panel = page.locator('details.state[data-state="waiting_approval"]')
        assert panel.get_attribute("open") is not None
        assert "approval.accepted" in panel.inner_text()
        screenshot(page, "table")


class TestApprovals:
    def test_approving_from_the_page_lets_the_runner_finish(
        self, page: Any, live: LiveServer, runs_db: Path
    ) -> None:
        """Signed in, the approver sees the call, approves it; a Runner then finishes."""
        _sign_in(page, live)
        page.goto(f"{live.url}/approvals")
        call = page.locator('article[data-run="pay-1"][data-action="t1.1"]')
        assert '"amount": 40' in call.locator("pre.args").first.inner_text()
        screenshot(page, "approvals")
        call.locator("form.approve input[name=approver]").fill("ann")
        call.locator("form.approve button").click()
        assert page.locator("#outcome").get_attribute("data-ok") == "1"
        screenshot(page, "approved")
        with structlog.testing.capture_logs(), SQLiteEventStore(runs_db) as store:
            result = Runner(store, refund_agent()).drive("pay-1")
        assert result.final_output == "Refund is done."
        page.goto(f"{live.url}/run?id=pay-1")
        assert page.locator("h1 .status").inner_text() == "completed"

    def test_a_stale_approval_is_refused(self, page: Any, live: LiveServer, runs_db: Path) -> None:
        """A call decided elsewhere after the page loaded, or a form bound to another
        call's digest: refused, nothing written."""
        _sign_in(page, live)
        page.goto(f"{live.url}/approvals")
        form = page.locator('article[data-run="pay-1"] form.approve')
        form.locator("input[name=digest]").evaluate("(e) => e.value = 'sha256:' + '0'.repeat(64)")
        form.locator("input[name=approver]").fill("ann")
        form.locator("button").click()
        assert page.locator("#outcome").get_attribute("data-ok") == "0"
        assert "is not the call reviewed" in page.locator("#outcome").inner_text()
        page.goto(f"{live.url}/approvals")
        with SQLiteEventStore(runs_db) as store:
            control.approve(store, "pay-1", "t1.1", "bob")
        form = page.locator('article[data-run="pay-1"] form.approve')
        form.locator("input[name=approver]").fill("ann")
        form.locator("button").click()
        assert page.locator("#outcome").get_attribute("data-ok") == "0"
        screenshot(page, "refused")
        with SQLiteEventStore(runs_db) as store:
            assert store.load("pay-1").actions["t1.1"].approver == "bob"

    def test_a_big_batch_is_paged_and_decided_from_a_later_page(
        self, page: Any, tmp_path: Path
    ) -> None:
        """A run waiting on more calls than a page holds: the inbox shows a page of them
        under one summary of the batch; `next` shows the rest, and a call approved there is
        the one approved."""
        path = tmp_path / "batch.db"
        make_batch(path, CALLS_PER_PAGE + 5)
        server = LiveServer(path)
        try:
            _sign_in(page, server)
            page.goto(f"{server.url}/approvals")
            assert page.locator("article.approval").count() == CALLS_PER_PAGE
            summary = page.locator('section.inbox-run[data-run="batch"] p.batch')
            assert summary.inner_text() == f"Batch of {CALLS_PER_PAGE + 5} call(s): refund approval_pending {CALLS_PER_PAGE + 5}"
            screenshot(page, "approvals-batch")
            page.click("nav.inbox-pager a[rel=next] >> nth=0")
            calls = page.locator("article.approval")
            assert calls.count() == 5
            last = f"t1.{CALLS_PER_PAGE + 5}"
            card = page.locator(f'article.approval[data-action="{last}"]')
            assert '"order": "O-' in card.locator("pre.args").inner_text()
            card.locator("form.approve input[name=approver]").fill("ann")
            card.locator("form.approve button").click()
            assert page.locator("#outcome").get_attribute("data-ok") == "1"
            with SQLiteEventStore(path) as store:
                record = store.load("batch")
            assert (record.actions[last].status, record.actions[last].approver) == ("approved", "ann")
            assert len(record.pending_approvals) == CALLS_PER_PAGE + 4
        finally:
            server.stop()

    def test_a_mutation_without_the_token_is_refused(self, page: Any, live: LiveServer) -> None:
        """Not signed in, the form's approval is refused with 403."""
        page.goto(f"{live.url}/approvals")
        form = page.locator('article[data-run="pay-1"] form.approve')
        form.locator("input[name=approver]").fill("mallory")
        with page.expect_response("**/act/approve") as answer:
            form.locator("button").click()
        assert answer.value.status == 403
        assert "needs the UI's token" in page.locator(".message").inner_text()

    def test_a_wrong_csrf_token_is_refused(self, page: Any, live: LiveServer) -> None:
        """Signed in, but the form's CSRF token is not the server's: 403."""
        _sign_in(page, live)
        page.goto(f"{live.url}/approvals")
        form = page.locator('article[data-run="pay-1"] form.approve')
        form.locator("input[name=csrf]").evaluate("(e) => e.value = 'forged'")
        form.locator("input[name=approver]").fill("ann")
        with page.expect_response("**/act/approve") as answer:
            form.locator("button").click()
        assert answer.value.status == 403
        assert "CSRF" in page.locator(".message").inner_text()


class TestUntrustedText:
    def test_an_xss_payload_in_arguments_stays_inert(self, page: Any, live: LiveServer) -> None:
        """The payload is shown as text on every page and never runs."""
        _sign_in(page, live)
        for url in ("/", "/run?id=pay-1", "/run?id=pay-1&at=3", "/approvals"):
            page.goto(f"{live.url}{url}")
            _no_script_ran(page)
            assert page.locator("img[src=x]").count() == 0
        assert "<script>window.__xss = 1</script>" in page.locator("pre.args").first.inner_text()


class TestReport:
    def test_the_report_works_offline(self, page: Any, runs_db: Path, tmp_path: Path) -> None:
        """The file asks for nothing beyond itself; states click; runs step through."""
        log = tmp_path / "runs.jsonl"
        with SQLiteEventStore(runs_db) as store, log.open("w") as out:
            for info in store.runs():
                out.writelines(dump_event(e) + "\n" for e in store.events(info.run_id))
        lines = log.read_text().splitlines()
        lines.append(lines[-1].replace('"sequence":6', '"sequence":7'))  # a repeat breaks it
        report = tmp_path / "review.html"
        report.write_text(render_report(log=lines), encoding="utf-8")
        requests: list[str] = []
        page.on("request", lambda r: requests.append(r.url))
        page.goto(report.as_uri())
        assert requests == [report.as_uri()]
        page.click('svg.diagram g.node[data-state="paused"] >> nth=0')
        assert page.locator('details.state[data-state="paused"]').get_attribute("open") is not None
        run = page.locator('article.run:has(h3 code:text-is("pay-1"))')
        run.locator('button.step[data-step="1"]').click()
        assert '"status": "running"' in run.locator(".step-record").inner_text()
        assert run.locator("svg.diagram g.node.current").get_attribute("data-state") == "running"
        _no_script_ran(page)
        screenshot(page, "report")
        assert requests == [report.as_uri()]
