"""Issue 29's review-grade pages, through the app (TestClient over a real SQLite store of
runs a Runner made): the steering offered, the approval's context, who continues a run,
the approver from the deployment's identity header, the favicon, the skip link."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import structlog
from starlette.testclient import TestClient

from agentfsm import Runner, SQLiteEventStore
from agentfsm.runtime import control
from agentfsm.ui._security import COOKIE
from tests.ui.conftest import CSRF, TOKEN, answer_agent, client, make_reasoned


@pytest.fixture
def why_db(tmp_path: Path) -> Path:
    path = tmp_path / "why.db"
    make_reasoned(path)
    return path


def _signed(path: Path, **config: object) -> TestClient:
    c = client(path, **config)
    c.cookies.set(COOKIE, TOKEN)
    return c


def _buttons(page: str) -> set[str]:
    """The steering forms drawn (the fork form of the path's step is not a steering verb)."""
    return set(re.findall(r'action="/act/(\w+)"', page)) - {"fork"}


class TestSteering:
    def test_a_waiting_run_offers_cancel_but_not_pause(self, signed_in: TestClient) -> None:
        """Pause on a run waiting for approval led to a 409 (issue 29): not drawn now."""
        page = signed_in.get("/run?id=pay-1").text
        assert _buttons(page) == {"cancel"}

    def test_a_paused_run_offers_resume_and_cancel(self, signed_in: TestClient, runs_db: Path) -> None:
        with structlog.testing.capture_logs(), SQLiteEventStore(runs_db) as store:
            control.submit(store, "idle-1", "Wait")
            control.pause(store, "idle-1", "the customer's reply")
        assert _buttons(signed_in.get("/run?id=idle-1").text) == {"cancel", "resume"}

    def test_a_run_between_steps_offers_pause_and_cancel(self, signed_in: TestClient, runs_db: Path) -> None:
        with structlog.testing.capture_logs(), SQLiteEventStore(runs_db) as store:
            control.submit(store, "idle-2", "Wait")
        assert _buttons(signed_in.get("/run?id=idle-2").text) == {"cancel", "pause"}

    def test_an_ended_run_offers_nothing(self, signed_in: TestClient) -> None:
        page = signed_in.get("/run?id=done-1").text
        assert _buttons(page) == set()
        assert "<h2>Steer</h2>" not in page


class TestApprovalContext:
    def test_the_card_shows_the_reasoning_and_earlier_results(self, why_db: Path) -> None:
        """Before the call: what the model said with it, and the results it had read."""
        page = _signed(why_db).get("/approvals").text
        assert "The parcel never arrived (tracking says lost), so a refund is due." in page
        earlier = page[page.index('class="earlier"') : page.index("The call</h3>")]
        assert "lookup" in earlier
        assert "&#34;tracking&#34;: &#34;lost&#34;" in earlier
        assert re.search(r'<time class="countdown" datetime="[^"]+">at ', page)

    def test_after_approving_the_page_says_who_continues(self, why_db: Path) -> None:
        c = _signed(why_db)
        with SQLiteEventStore(why_db) as store:
            action = store.load("why-1").actions["t2.1"]
        answer = c.post("/act/approve", data={
            "csrf": CSRF, "run_id": "why-1", "action_id": "t2.1",
            "digest": action.arguments_digest, "approver": "ann",
        })  # fmt: skip
        assert answer.status_code == 200
        said = re.search(r'id="who-continues">(.*?)</p>', answer.text, re.S).group(1)
        assert "No driver holds this run now" in said
        assert 'Runner.drive("why-1")' in said


class TestIdentityHeader:
    def test_the_approver_is_the_signed_in_person(self, why_db: Path) -> None:
        """With `identity_header`, the forms name the person the proxy signed in, and the
        decision records that name, whatever the form said."""
        c = _signed(why_db, identity_header="X-Forwarded-User")
        page = c.get("/approvals", headers={"X-Forwarded-User": "carol"}).text
        assert 'name="approver"' not in page
        assert "signed in as carol" in page
        with SQLiteEventStore(why_db) as store:
            digest = store.load("why-1").actions["t2.1"].arguments_digest
        form = {"csrf": CSRF, "run_id": "why-1", "action_id": "t2.1", "digest": digest,
                "approver": "mallory"}  # fmt: skip
        assert c.post("/act/approve", data=form, headers={"X-Forwarded-User": "carol"}).status_code == 200
        with SQLiteEventStore(why_db) as store:
            assert store.load("why-1").actions["t2.1"].approver == "carol"

    def test_a_change_without_the_header_is_refused(self, why_db: Path) -> None:
        c = _signed(why_db, identity_header="X-Forwarded-User")
        with SQLiteEventStore(why_db) as store:
            digest = store.load("why-1").actions["t2.1"].arguments_digest
        form = {"csrf": CSRF, "run_id": "why-1", "action_id": "t2.1", "digest": digest,
                "approver": "mallory"}  # fmt: skip
        answer = c.post("/act/approve", data=form)
        assert answer.status_code == 403
        assert "X-Forwarded-User" in answer.text
        with SQLiteEventStore(why_db) as store:
            assert store.load("why-1").actions["t2.1"].status == "approval_pending"


class TestChrome:
    def test_the_favicon_is_served(self, ui: TestClient) -> None:
        answer = ui.get("/favicon.ico")
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("image/svg+xml")
        assert '<link rel="icon" href="/static/favicon.svg"' in ui.get("/").text

    def test_every_page_starts_with_a_skip_link(self, ui: TestClient) -> None:
        for url in ("/", "/run?id=pay-1", "/approvals", "/tables"):
            body = ui.get(url).text.split("<body", 1)[1]
            first = re.search(r"<a [^>]*>", body).group(0)
            assert 'class="skip" href="#main"' in first, url
            assert 'id="main"' in body


class TestIdentityHeaderFlag:
    def test_a_bad_header_name_is_refused_in_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from agentfsm.cli import main

        code = main(["ui", "--store", str(tmp_path / "none.db"), "--identity-header", "X User:"])
        out = capsys.readouterr()
        assert (code, out.out) == (2, "")
        assert out.err == (
            "agentfsm ui: --identity-header 'X User:' is not a header name "
            "(letters, digits and '-', like X-Forwarded-User)\n"
        )


class TestTimeline:
    def test_events_are_grouped_by_turn_with_bars(self, why_db: Path) -> None:
        """Turn 1 (the lookup: model call, then the tool), turn 2 (the refund: model call,
        then a wait for a person that is still open), times relative to the start."""
        page = _signed(why_db).get("/run?id=why-1").text
        turns = re.findall(r'<tbody class="turn-group" data-turn="(\d+)">', page)
        assert turns == ["0", "1", "2"]
        labels = re.findall(r'<span class="bar-label">([^<]+)</span>', page)
        assert labels == ["model call", "tool lookup", "model call", "waiting for a person on t2.1"]
        assert 'class="bar bar-wait bar-open"' in page
        assert re.search(r'<time datetime="[^"]+" title="[^"]+">\+\d', page)
        assert '<details class="fields"><summary>' in page

    def test_a_step_says_what_changed_in_the_record(self, why_db: Path) -> None:
        """At the approval request: the status moved and the call joined the waiting list;
        `since=` compares with any earlier event."""
        c = _signed(why_db)
        with SQLiteEventStore(why_db) as store:
            seq = next(e.sequence for e in store.events("why-1") if e.type == "approval.requested")
        page = c.get(f"/run?id=why-1&at={seq}").text
        section = page[page.index('id="changes"') : page.index("</section>", page.index('id="changes"'))]
        assert f"What changed in the record from event {seq - 1} to event {seq}" in section
        fields = re.findall(r"<tr><td><code>(\w+)</code></td>", section)
        assert "status" in fields
        assert "<code>t2.1</code> changed: <code>status</code>" in section
        since = c.get(f"/run?id=why-1&at={seq}&since=1").text
        assert f"from event 1 to event {seq}" in since
        assert "<code>t1.1</code> added" in since


class TestRunsList:
    def test_counts_per_status_and_totals(self, ui: TestClient) -> None:
        page = ui.get("/").text
        counts = dict(re.findall(r'<span class="status s-(\w+)">\w+</span> (\d+)</a>', page))
        assert counts == {"completed": "2", "waiting_approval": "1"}
        assert "<strong>3</strong> runs in all" in page

    def test_search_by_objective_agent_or_tool(self, ui: TestClient) -> None:
        def found(text: str) -> list[str]:
            return re.findall(r'<tr data-run="([^"]+)">', ui.get("/", params={"text": text}).text)

        assert found("say BYE") == ["done-2"]  # the objective, any case
        assert found("payments") == ["pay-1"]  # the agent
        assert found("refund") == ["pay-1"]  # a tool it called (and its objective)
        assert found("helper") == ["done-2", "done-1"]
        assert found("nothing like it") == []

    def test_a_date_range(self, ui: TestClient, runs_db: Path) -> None:
        with SQLiteEventStore(runs_db) as store:
            day = store.load("done-1").started_at[:10]
        assert len(re.findall(r"<tr data-run=", ui.get("/", params={"since": day, "until": day}).text)) == 3
        assert "No runs match." in ui.get("/", params={"until": "2000-01-01"}).text
        bad = ui.get("/", params={"since": "yesterday"})
        assert (bad.status_code, "must be a date, YYYY-MM-DD" in bad.text) == (400, True)

    def test_previous_page_goes_back_one(self, runs_db: Path) -> None:
        c = client(runs_db, page_size=1)
        first = c.get("/").text
        second_url = html.unescape(re.search(r'rel="next" href="([^"]+)"', first).group(1))
        second = c.get(second_url).text
        third_url = html.unescape(re.search(r'rel="next" href="([^"]+)"', second).group(1))
        third = c.get(third_url).text
        assert re.findall(r'<tr data-run="([^"]+)">', third) == ["done-1"]
        back = html.unescape(re.search(r'rel="prev" href="([^"]+)"', third).group(1))
        assert re.findall(r'<tr data-run="([^"]+)">', c.get(back).text) == ["done-2"]
        back = html.unescape(re.search(r'rel="prev" href="([^"]+)"', second).group(1))
        assert re.findall(r'<tr data-run="([^"]+)">', c.get(back).text) == ["pay-1"]

    def test_newest_first_by_default_and_each_sort(self, runs_db: Path) -> None:
        """Newest first unless asked (a run made last with the lowest id comes first), and
        oldest first, by run id or by status on request."""
        with structlog.testing.capture_logs(), SQLiteEventStore(runs_db) as store:
            Runner(store, answer_agent("late")).run("aaa-4", "Made last")
        c = client(runs_db)

        def rows(url: str) -> list[str]:
            return re.findall(r'<tr data-run="([^"]+)">', c.get(url).text)

        assert rows("/") == ["aaa-4", "pay-1", "done-2", "done-1"]
        assert rows("/?sort=newest") == rows("/")
        assert rows("/?sort=oldest") == ["done-1", "done-2", "pay-1", "aaa-4"]
        assert rows("/?sort=run_id") == ["aaa-4", "done-1", "done-2", "pay-1"]
        assert rows("/?sort=status") == ["aaa-4", "done-1", "done-2", "pay-1"]
        assert rows("/?sort=oldest&status=completed") == ["done-1", "done-2", "aaa-4"]
        assert rows("/?q=done") == ["done-1", "done-2"]  # a run id's start: by run id
        assert rows("/?q=done&sort=newest") == ["done-2", "done-1"]
        page = c.get("/?sort=oldest").text
        assert '<option value="oldest" selected>oldest first</option>' in page
        assert "runs in all · oldest first</p>" in page

    def test_page_links_keep_the_sort_and_the_filters(self, runs_db: Path) -> None:
        """Next, previous and first page, the polled rows and the status counts carry the
        sort and the filters."""
        c = client(runs_db, page_size=1)
        first = c.get("/?sort=oldest&status=completed&text=helper").text
        assert re.findall(r'<tr data-run="([^"]+)">', first) == ["done-1"]
        next_url = html.unescape(re.search(r'rel="next" href="([^"]+)"', first).group(1))
        assert next_url == "/?sort=oldest&status=completed&text=helper&after=done-1"
        second = c.get(next_url).text
        assert re.findall(r'<tr data-run="([^"]+)">', second) == ["done-2"]
        back = html.unescape(re.search(r'rel="prev" href="([^"]+)"', second).group(1))
        assert back == "/?sort=oldest&status=completed&text=helper"
        polled = html.unescape(re.search(r'data-poll-rows="([^"]+)"', second).group(1))
        assert polled.startswith("/?sort=oldest&status=completed&text=helper&after=done-1&")
        assert re.findall(r'<tr data-run="([^"]+)">', c.get(polled).text) == ["done-2"]
        assert 'href="/?sort=oldest&amp;status=waiting_approval"' in first

    def test_a_bad_sort_or_a_cursor_naming_no_run_is_a_400(self, ui: TestClient) -> None:
        bad = ui.get("/", params={"sort": "sideways"})
        assert (bad.status_code, "?sort= must be one of newest, oldest, run_id, status" in bad.text) == (400, True)
        gone = ui.get("/", params={"after": "no-such-run"})
        assert gone.status_code == 400
        assert "after=&#39;no-such-run&#39; names no run in the store" in gone.text

    def test_past_the_count_bound_the_total_is_an_estimate_and_says_so(self, runs_db: Path) -> None:
        """Counting stops at `count_up_to`: past it the page gives the store's estimate,
        marked as one; under it, the exact count."""
        page = client(runs_db, count_up_to=1).get("/").text
        total = re.search(r'<p class="total" id="runs-total">(.*?)</p>', page).group(1)
        assert total == (
            '<strong>about 3</strong> runs in all <span class="muted">(an estimate: counting '
            "stops at 1)</span> · newest first"
        )
        counts = dict(re.findall(r'<span class="status s-(\w+)">\w+</span> ([^<]+)</a>', page))
        assert counts["waiting_approval"] == "1"
        assert counts["completed"].startswith(("about ", "more than "))

    def test_the_driver_of_a_live_run_is_named(self, ui: TestClient, runs_db: Path) -> None:
        """A run not ended says who holds its lease, or that nobody does."""
        from agentfsm.stores._process import this_process

        row = r'<tr data-run="pay-1">.*?<td class="driver" data-label="driver">(.*?)</td>'
        assert "no driver holds it" in re.search(row, ui.get("/").text, re.S).group(1)
        with SQLiteEventStore(runs_db) as store:
            assert store._lease_rows().take("pay-1", "w-3", this_process(), 60)[0]
            said = re.search(row, ui.get("/").text, re.S).group(1)
        assert "driven by w-3 on" in said
        done = r'<tr data-run="done-1">.*?<td class="driver" data-label="driver">(.*?)</td>'
        assert re.search(done, ui.get("/").text, re.S).group(1) == ""


def test_the_records_around_a_step_are_the_records_at_either_side(why_db: Path) -> None:
    """The one-fold pair a step's "what changed" uses equals two folds of `record_at`."""
    from agentfsm.ui import Source
    from agentfsm.ui._pages import _records_around
    from tests.ui.conftest import opener

    source = Source(opener(why_db))
    version = source.record("why-1").version
    for seq in range(2, version + 1):
        assert _records_around(source, "why-1", seq) == (
            source.record_at("why-1", seq - 1), source.record_at("why-1", seq)
        )  # fmt: skip
