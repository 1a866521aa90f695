"""Time travel in the UI: fork a run from a step of its path, and compare two runs.

"Fork from event N" is a mutation like approve: it needs the token and the form's CSRF
token, and it is pinned to the event the page showed (its digest), so a fork is of exactly
what a person looked at. The diff page draws both runs' paths on one picture.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agentfsm import SQLiteEventStore
from agentfsm.runtime import control
from tests.ui.conftest import CSRF, TOKEN, LiveServer, screenshot


def _form(page: str) -> dict[str, str]:
    """The fork form's hidden fields and default new run id, as the page wrote them."""
    form = re.search(r'<form method="post" action="/act/fork".*?</form>', page, re.S)
    assert form is not None, "no fork form on the page"
    return dict(re.findall(r'name="(\w+)" value="([^"]*)"', form.group(0)))


def _fork(c: TestClient, **changes: str) -> Any:
    fields = _form(c.get("/run?id=pay-1&at=3").text)
    return c.post("/act/fork", data={**fields, "by": "ann", "reason": "try a no", **changes})


class TestForkFromThePage:
    def test_a_step_offers_a_fork_pinned_to_its_event(self, signed_in: TestClient) -> None:
        fields = _form(signed_in.get("/run?id=pay-1&at=3").text)
        assert (fields["run_id"], fields["at"], fields["as_run"]) == ("pay-1", "3", "pay-1-fork-3")
        assert fields["csrf"] == CSRF
        assert fields["pin"].startswith("sha256:")

    def test_forking_makes_a_new_run_and_links_the_comparison(
        self, signed_in: TestClient, runs_db: Path
    ) -> None:
        answer = _fork(signed_in)
        assert answer.status_code == 200, answer.text
        assert 'href="/diff?a=pay-1&amp;b=pay-1-fork-3"' in answer.text
        with SQLiteEventStore(runs_db) as store:
            fork = store.load("pay-1-fork-3")
            assert (fork.forked_from, fork.forked_at, fork.version) == ("pay-1", 3, 4)
            assert store.load("pay-1").version == 4  # the source only read
        page = signed_in.get("/run?id=pay-1-fork-3").text
        assert "forked from" in page
        assert 'href="/diff?a=pay-1&amp;b=pay-1-fork-3"' in page

    def test_a_pin_that_is_not_the_event_shown_is_refused(
        self, signed_in: TestClient, runs_db: Path
    ) -> None:
        answer = _fork(signed_in, pin="sha256:" + "0" * 64)
        assert answer.status_code == 409
        assert "is not the one this page showed" in answer.text
        with SQLiteEventStore(runs_db) as store:
            assert [r.run_id for r in store.runs()] == ["done-1", "done-2", "pay-1"]

    def test_an_existing_run_id_is_refused(self, signed_in: TestClient) -> None:
        answer = _fork(signed_in, as_run="done-1")
        assert answer.status_code == 409
        assert "exists already" in answer.text.replace("&#39;", "'")

    def test_without_the_token_or_the_csrf_token_nothing_is_written(
        self, ui: TestClient, signed_in: TestClient, runs_db: Path
    ) -> None:
        fields = _form(signed_in.get("/run?id=pay-1&at=3").text)
        assert ui.post("/act/fork", data=fields).status_code == 403
        assert signed_in.post("/act/fork", data={**fields, "csrf": "x"}).status_code == 403
        with SQLiteEventStore(runs_db) as store:
            assert len(list(store.runs())) == 3

    def test_an_ended_run_offers_no_fork_at_its_end(self, signed_in: TestClient) -> None:
        assert "/act/fork" not in signed_in.get("/run?id=done-1").text
        assert "/act/fork" in signed_in.get("/run?id=done-1&at=1").text


class TestDiffPage:
    def test_it_shows_where_the_runs_part_and_what_differs(
        self, signed_in: TestClient, runs_db: Path
    ) -> None:
        with SQLiteEventStore(runs_db) as store:
            control.fork(store, "pay-1", at=4, as_run="pay-2")
            control.reject(store, "pay-2", "t1.1", approver="bob", reason="no")
            control.approve(store, "pay-1", "t1.1", approver="ann")
        page = signed_in.get("/diff?a=pay-1&b=pay-2")
        assert page.status_code == 200
        text = page.text
        assert "The runs part at event 5" in text
        assert '<tr data-field="actions.t1.1.status">' in text
        assert "approval.accepted" in text
        assert "run.forked" in text

    def test_an_unknown_run_is_a_404(self, signed_in: TestClient) -> None:
        assert signed_in.get("/diff?a=pay-1&b=nope").status_code == 404
        assert signed_in.get("/diff?a=pay-1").status_code == 400


@pytest.mark.browser
def test_fork_and_compare_in_the_browser(page: Any, runs_db: Path) -> None:
    """A person steps to event 3, forks there, and opens the comparison: both paths are on
    one picture (the fork's states outlined), the differing fields listed."""
    live = LiveServer(runs_db)
    try:
        page.goto(f"{live.url}/login?token={TOKEN}")
        page.goto(f"{live.url}/run?id=pay-1&at=3")
        screenshot(page, "run-fork-form")
        page.fill('#fork input[name="reason"]', "what if we wait")
        with page.expect_navigation():
            page.click('#fork button[type="submit"]')
        assert page.locator("#outcome").get_attribute("data-ok") == "1"
        with page.expect_navigation():
            page.click('a:text("Compare it with pay-1")')
        assert page.locator("#diverges").inner_text().startswith("The runs part at event 4")
        outlined = page.locator("svg.diagram g.node.also")
        assert outlined.count() >= 2
        screenshot(page, "diff")
    finally:
        live.stop()
