"""The UI's routes through Starlette's TestClient: every page, every error, every refusal."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import structlog
from starlette.testclient import TestClient

from agentfsm import DEFAULT_TABLE, Runner, SQLiteEventStore
from agentfsm.errors import ActionError
from agentfsm.events._canonical import call_digest
from agentfsm.runtime import control
from agentfsm.ui._security import CSP
from tests.ui.conftest import CSRF, TOKEN, client, refund_agent


def _digest(path: Path, run_id: str = "pay-1", action_id: str = "t1.1") -> str:
    with SQLiteEventStore(path) as store:
        return store.load(run_id).actions[action_id].arguments_digest


def _approve(c: TestClient, path: Path, **override: str) -> object:
    form = {"csrf": CSRF, "run_id": "pay-1", "action_id": "t1.1", "digest": _digest(path),
            "approver": "ann", **override}  # fmt: skip
    return c.post("/act/approve", data=form)


class TestPages:
    def test_runs_list_shows_every_run_with_its_status(self, ui: TestClient) -> None:
        """The list names each run the Runner made, newest first, with its status and agent."""
        page = ui.get("/")
        assert page.status_code == 200
        rows = re.findall(r'<tr data-run="([^"]+)">', page.text)
        assert rows == ["pay-1", "done-2", "done-1"]
        assert "waiting_approval" in page.text
        assert "payments" in page.text

    def test_runs_list_filters_by_status_table_and_id(self, ui: TestClient) -> None:
        """Status, table and run-id prefix each narrow the list."""
        only = lambda url: re.findall(r'<tr data-run="([^"]+)">', ui.get(url).text)  # noqa: E731
        assert only("/?status=completed") == ["done-2", "done-1"]
        assert only("/?q=done-2") == ["done-2"]
        assert only("/?q=done") == ["done-1", "done-2"]
        assert only("/?table=agent_run&status=waiting_approval") == ["pay-1"]
        assert only("/?table=no_such_table") == []

    def test_runs_list_pages_by_cursor(self, runs_db: Path) -> None:
        """With two runs a page, the next page starts after the last run shown."""
        c = client(runs_db, page_size=2)
        first = c.get("/")
        assert re.findall(r'<tr data-run="([^"]+)">', first.text) == ["pay-1", "done-2"]
        assert 'href="/?sort=newest&amp;after=done-2"' in first.text
        second = c.get("/?after=done-2")
        assert re.findall(r'<tr data-run="([^"]+)">', second.text) == ["done-1"]
        assert 'rel="next"' not in second.text

    def test_rows_fragment_is_what_the_list_polls(self, ui: TestClient) -> None:
        """`fragment=rows` answers the table rows only (the page's live update)."""
        rows = ui.get("/?fragment=rows").text
        assert rows.lstrip().startswith("<tr")
        assert "<html" not in rows

    def test_run_page_shows_timeline_actions_and_path(self, ui: TestClient, runs_db: Path) -> None:
        """A run's page has its events, its call with digest and idempotency key, and the
        diagram with the state it is in marked."""
        page = ui.get("/run?id=pay-1")
        assert page.status_code == 200
        text = page.text
        for piece in ("run.started", "approval.requested", "refund", "pay-1:t1.1", _digest(runs_db)):
            assert piece in text
        # Not stepping: the step is the last event, so the state is both current and final.
        assert 'class="node current final" data-state="waiting_approval"' in text
        assert "Waiting for a decision on t1.1." in text

    def test_step_through_shows_the_state_at_an_event(self, ui: TestClient) -> None:
        """`at=N` shows the record after event N and marks its state on the diagram."""
        page = ui.get("/run?id=done-1&at=1").text
        assert "state after event 1: <code class=\"state-at\">running</code>" in page
        assert 'class="node current" data-state="running"' in page
        record = ui.get("/run/record.json?id=done-1&at=1").json()
        assert (record["status"], record["version"]) == ("running", 1)

    def test_a_step_marks_its_state_the_final_state_and_the_move_apart(self, ui: TestClient) -> None:
        """Stepping: the step's state is `current`, the run's state now `final` (another node),
        and the edge of the move the event made is `step`."""
        page = ui.get("/run?id=done-1&at=3").text  # model.completed: a move within `running`
        assert 'class="edge step"' not in page
        assert 'class="node current" data-state="running"' in page
        assert 'class="node final" data-state="completed"' in page
        page = ui.get("/run?id=done-1&at=4").text  # run.completed
        moves = re.findall(r'class="edge step" data-from="([^"]+)" data-to="([^"]+)"', page)
        assert moves == [("running", "completed")]
        assert 'class="node current final" data-state="completed"' in page

    def test_the_run_diagram_is_the_path_only_unless_asked(self, ui: TestClient) -> None:
        """By default the run's diagram draws only the states it visited, and says how many
        it left out; `view=table` draws the whole table with the path on it."""
        table = DEFAULT_TABLE.state_names
        path_only = ui.get("/run?id=done-1").text
        drawn = set(re.findall(r'data-state="([^"]+)"', path_only))
        assert drawn == {"created", "running", "completed"}
        assert f"{len(table) - 3} it never visited left out" in path_only
        whole = ui.get("/run?id=done-1&view=table").text
        assert set(re.findall(r'data-state="([^"]+)"', whole)) == set(table)
        # Stepping keeps the view chosen.
        assert "view=table" in re.search(r'<a [^>]*data-step="prev"[^>]*>|$', ui.get("/run?id=done-1&view=table&at=3").text).group(0)

    def test_states_are_keyboard_controls(self, ui: TestClient) -> None:
        """Each state of a diagram is a tab stop with a name a screen reader says."""
        page = ui.get("/run?id=done-1").text
        assert re.search(
            r'data-state="running" tabindex="0" role="button" aria-label="state running"', page
        )

    def test_version_answers_for_polling(self, ui: TestClient) -> None:
        """`/run/version` is the run's index row: version and status."""
        assert ui.get("/run/version?id=done-1").json() == {"version": 4, "status": "completed"}

    def test_approvals_inbox_lists_the_waiting_call(self, signed_in: TestClient, runs_db: Path) -> None:
        """The inbox shows the tool, the full arguments, the digest and the run's context."""
        page = signed_in.get("/approvals").text
        assert 'data-run="pay-1" data-action="t1.1"' in page
        assert _digest(runs_db) in page
        assert "O-1" in page
        assert "Refund order O-1" in page
        assert f'name="csrf" value="{CSRF}"' in page

    def test_tables_and_a_table_page(self, ui: TestClient) -> None:
        """The default table is listed; its page has states, transitions and the check."""
        tables = ui.get("/tables").text
        digest = re.search(r'href="/table\?digest=(sha256%3A[0-9a-f]{64})"', tables)
        assert digest is not None
        page = ui.get(f"/table?digest={digest.group(1)}").text
        assert 'data-state="waiting_approval"' in page
        assert "table 'agent_run': 10 states" in page
        assert "0 error(s)" in page
        assert "batch resolved" in page  # a condition in the transitions table

    def test_static_assets_are_served(self, ui: TestClient) -> None:
        """The stylesheet and script come from the package."""
        assert ui.get("/static/app.js").status_code == 200
        assert ui.get("/static/app.css").status_code == 200


class TestErrors:
    def test_unknown_run_is_a_404_page(self, ui: TestClient) -> None:
        """A run the store lacks: a page that says so, no traceback."""
        page = ui.get("/run?id=nope")
        assert page.status_code == 404
        assert "run &#39;nope&#39;" in page.text
        assert "Traceback" not in page.text

    def test_missing_and_bad_parameters_are_400(self, ui: TestClient) -> None:
        """`/run` without an id, or with a page that is not a number, is a bad request."""
        assert ui.get("/run").status_code == 400
        assert ui.get("/run?id=done-1&page=x").status_code == 400
        assert ui.get("/table").status_code == 400

    def test_unknown_table_and_path_are_404(self, ui: TestClient) -> None:
        """A digest no table has, and a path no route has."""
        assert ui.get("/table?digest=sha256:00").status_code == 404
        assert ui.get("/nowhere").status_code == 404

    def test_a_failure_is_a_page_without_traceback(self, runs_db: Path) -> None:
        """An unexpected error is a 500 page naming its type only."""
        c = client(runs_db)
        c.app.state.source.record = None  # type: ignore[attr-defined]  (now it fails)
        page = c.get("/run?id=done-1")
        assert page.status_code == 500
        assert "unexpected TypeError" in page.text
        assert "Traceback" not in page.text

    def test_other_hosts_are_not_answered(self, runs_db: Path) -> None:
        """A Host header the server was not started for (DNS rebinding) gets 400."""
        c = client(runs_db, allowed_hosts=("127.0.0.1",))
        assert c.get("/", headers={"host": "evil.example"}).status_code == 400


class TestSecurity:
    def test_headers_on_every_response(self, ui: TestClient) -> None:
        """CSP, no framing, no sniffing, no referrer to other sites: on pages, errors and assets."""
        for url in ("/", "/nowhere", "/static/app.css"):
            headers = ui.get(url).headers
            assert headers["content-security-policy"] == CSP
            assert headers["x-frame-options"] == "DENY"
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["referrer-policy"] == "same-origin"

    def test_log_text_is_escaped_everywhere(self, signed_in: TestClient) -> None:
        """The payload in the call's arguments and the run's objective never reaches a page
        as markup."""
        for url in ("/", "/run?id=pay-1", "/approvals", "/run?id=pay-1&at=3"):
            text = signed_in.get(url).text
            assert "<script>window" not in text
            assert "<img src=x" not in text
        assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in signed_in.get("/approvals").text

    def test_a_mutation_without_the_token_is_refused(self, ui: TestClient, runs_db: Path) -> None:
        """No token cookie: 403, nothing written."""
        answer = _approve(ui, runs_db)
        assert answer.status_code == 403  # type: ignore[attr-defined]
        assert "needs the UI&#39;s token" in answer.text  # type: ignore[attr-defined]
        with SQLiteEventStore(runs_db) as store:
            assert store.load("pay-1").pending_approvals == ("t1.1",)

    def test_a_wrong_token_is_refused(self, runs_db: Path) -> None:
        """A cookie or bearer token that is not the token: 403."""
        c = client(runs_db)
        c.cookies.set("agentfsm_ui_token", "guess")
        assert _approve(c, runs_db).status_code == 403  # type: ignore[attr-defined]
        c.cookies.clear()
        c.headers["authorization"] = "Bearer guess"
        assert _approve(c, runs_db).status_code == 403  # type: ignore[attr-defined]

    def test_a_wrong_or_missing_csrf_token_is_refused(self, signed_in: TestClient, runs_db: Path) -> None:
        """The token alone is not enough: the form's CSRF token must match."""
        assert _approve(signed_in, runs_db, csrf="0" * 64).status_code == 403  # type: ignore[attr-defined]
        assert _approve(signed_in, runs_db, csrf="").status_code == 403  # type: ignore[attr-defined]

    def test_another_sites_origin_is_refused(self, signed_in: TestClient, runs_db: Path) -> None:
        """A form posted from another site's page (its Origin) is refused."""
        signed_in.headers["origin"] = "https://evil.example"
        assert _approve(signed_in, runs_db).status_code == 403  # type: ignore[attr-defined]

    def test_bearer_token_with_csrf_is_accepted(self, runs_db: Path) -> None:
        """A script may send the token as `Authorization: Bearer`."""
        c = client(runs_db)
        c.headers["authorization"] = f"Bearer {TOKEN}"
        assert _approve(c, runs_db).status_code == 200  # type: ignore[attr-defined]

    def test_login_sets_an_httponly_strict_cookie(self, ui: TestClient) -> None:
        """The printed URL signs in: the token goes into a cookie and leaves the address."""
        answer = ui.get(f"/login?token={TOKEN}", follow_redirects=False)
        assert answer.status_code == 303
        assert answer.headers["location"] == "/"
        cookie = answer.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie
        assert ui.get("/login?token=wrong").status_code == 403

    def test_read_only_serves_no_mutations(self, runs_db: Path) -> None:
        """In read-only mode the mutation routes do not exist and no form is drawn."""
        c = client(runs_db, read_only=True)
        c.cookies.set("agentfsm_ui_token", TOKEN)
        for verb in ("approve", "reject", "cancel", "pause", "resume"):
            assert c.post(f"/act/{verb}", data={"csrf": CSRF}).status_code in (404, 405)
        assert "/act/" not in c.get("/approvals").text + c.get("/run?id=pay-1").text


class TestSteering:
    def test_approve_appends_through_the_reducer(self, signed_in: TestClient, runs_db: Path) -> None:
        """An approval from the page is an `approval.accepted` bound to the digest shown."""
        answer = _approve(signed_in, runs_db)
        assert answer.status_code == 200, answer.text  # type: ignore[attr-defined]
        with SQLiteEventStore(runs_db) as store:
            record = store.load("pay-1")
            last = list(store.events("pay-1"))[-1]
        assert (record.status, record.actions["t1.1"].approver) == ("running", "ann")
        assert (last.type, last.arguments_digest) == ("approval.accepted", _digest(runs_db))  # type: ignore[union-attr]

    def test_a_call_other_than_the_one_shown_is_refused(
        self, signed_in: TestClient, runs_db: Path
    ) -> None:
        """A form whose digest is not the waiting call's (the page showed another call):
        refused, naming both digests, and nothing is written."""
        other = call_digest("refund", {"order": "O-1", "amount": 4000})
        answer = _approve(signed_in, runs_db, digest=other)
        assert answer.status_code == 409  # type: ignore[attr-defined]
        assert f"is not the call reviewed: it has digest {_digest(runs_db)}, not {other}" in (
            answer.text.replace("&#39;", "'")  # type: ignore[attr-defined]
        )
        with SQLiteEventStore(runs_db) as store:
            assert store.load("pay-1").pending_approvals == ("t1.1",)

    def test_a_call_decided_since_the_page_loaded_is_refused(
        self, signed_in: TestClient, runs_db: Path
    ) -> None:
        """Approved elsewhere after the page loaded: the page's approval is refused, saying
        who approved it and when."""
        with SQLiteEventStore(runs_db) as store:
            control.approve(store, "pay-1", "t1.1", "bob")
            version = store.load("pay-1").version
            decided = list(store.events("pay-1"))[-1]
        answer = _approve(signed_in, runs_db)
        assert answer.status_code == 409  # type: ignore[attr-defined]
        message = re.search(r'<p class="message">(.*?)</p>', answer.text)  # type: ignore[attr-defined]
        assert message is not None
        assert html.unescape(message.group(1)) == (
            f"run 'pay-1': call 't1.1' was already approved by 'bob' at {decided.occurred_at} "
            f"(sequence {version})"
        )
        assert "Nothing was written" in answer.text  # type: ignore[attr-defined]
        with SQLiteEventStore(runs_db) as store:
            assert store.load("pay-1").version == version

    def test_the_reducer_refuses_a_stale_digest_too(self, runs_db: Path) -> None:
        """Below the page's own check, the library refuses a decision for another call."""
        with SQLiteEventStore(runs_db) as store, pytest.raises(ActionError, match=r"the decision is for call sha256:0+, but the call waiting is"):
            control.approve(store, "pay-1", "t1.1", "ann", digest="sha256:" + "0" * 64)

    def test_approve_records_approver_and_reason(self, signed_in: TestClient, runs_db: Path) -> None:
        """An approval from the page carries who and, when given, why."""
        assert _approve(signed_in, runs_db, reason="order checked").status_code == 200  # type: ignore[attr-defined]
        with SQLiteEventStore(runs_db) as store:
            action = store.load("pay-1").actions["t1.1"]
        assert (action.status, action.approver, action.reason) == ("approved", "ann", "order checked")

    def test_reject_records_approver_and_reason(self, signed_in: TestClient, runs_db: Path) -> None:
        """A rejection carries who and why; the run goes on without the call."""
        form = {"csrf": CSRF, "run_id": "pay-1", "action_id": "t1.1", "digest": _digest(runs_db),
                "approver": "ann", "reason": "too much"}  # fmt: skip
        assert signed_in.post("/act/reject", data=form).status_code == 200
        with SQLiteEventStore(runs_db) as store:
            action = store.load("pay-1").actions["t1.1"]
        assert (action.status, action.approver, action.reason) == ("rejected", "ann", "too much")

    def test_approve_needs_an_approver(self, signed_in: TestClient, runs_db: Path) -> None:
        """An empty approver is a bad request, not an anonymous approval."""
        assert _approve(signed_in, runs_db, approver=" ").status_code == 400  # type: ignore[attr-defined]

    def test_pause_resume_and_cancel(self, signed_in: TestClient, runs_db: Path) -> None:
        """The run verbs follow the CLI's rules: a waiting run cannot be paused (refused, 409),
        it can be cancelled."""
        base = {"csrf": CSRF, "run_id": "pay-1"}
        refused = signed_in.post("/act/pause", data={**base, "reason": "lunch"})
        assert refused.status_code == 409
        assert "Nothing was written" in refused.text
        assert signed_in.post("/act/resume", data=base).status_code == 409
        done = signed_in.post("/act/cancel", data={**base, "reason": "no", "requested_by": "ann"})
        assert done.status_code == 200
        with SQLiteEventStore(runs_db) as store:
            assert store.load("pay-1").status in ("cancel_requested", "cancelled")

    def test_a_pause_while_a_driver_holds_the_run_is_refused_naming_it(
        self, signed_in: TestClient, runs_db: Path
    ) -> None:
        """A pause would change the run under its driver: refused (409), the driver named."""
        with SQLiteEventStore(runs_db) as store:
            lease = store.hold("pay-1", holder="w1")
            answer = signed_in.post("/act/pause", data={"csrf": CSRF, "run_id": "pay-1",
                                                        "reason": "lunch"})  # fmt: skip
            lease.release()
        assert answer.status_code == 409
        assert "is being driven by &#39;w1&#39; (pid " in answer.text

    def test_an_ended_run_refuses_steering(self, signed_in: TestClient) -> None:
        """Cancelling a completed run is refused by the lifecycle, said in words."""
        answer = signed_in.post("/act/cancel", data={"csrf": CSRF, "run_id": "done-1"})
        assert answer.status_code == 409
        assert "completed" in answer.text

    def test_a_runner_finishes_after_a_page_approval(self, signed_in: TestClient, runs_db: Path) -> None:
        """Approved from the page, the run is finished by a Runner in another handle."""
        assert _approve(signed_in, runs_db).status_code == 200  # type: ignore[attr-defined]
        with structlog.testing.capture_logs(), SQLiteEventStore(runs_db) as store:
            result = Runner(store, refund_agent()).drive("pay-1")
        assert (result.status, result.final_output) == ("completed", "Refund is done.")
        assert "Refund is done." in signed_in.get("/run?id=pay-1").text
