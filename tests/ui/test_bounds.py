"""Every page and the review file stay bounded whatever the store holds (issue 25).

The attack: one model decision proposes many calls that need approval. The inbox drew, for
every waiting call, every other call of its batch: 1,000 calls made a 353 MB page in 44 s,
3,000 no answer in 120 s, and since the inbox lists every run, one bad batch blocked every
approver. The review file had the same square (every step carried the whole batch).
"""

from __future__ import annotations

import html
import itertools
import json
import re
import time
from pathlib import Path
from typing import Any

import attrs
import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from agentfsm import DEFAULT_TABLE, LogBuilder, Runner, SQLiteEventStore
from agentfsm.events import dump_event
from agentfsm.events.codec import event_to_dict
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import control
from agentfsm.stores.base import StoreOptions
from agentfsm.stores.memory import MemoryEventStore, MemoryStorage
from agentfsm.ui import LogSource, Source, UIConfig, create_app, render_report
from agentfsm.ui._pages import ACTIONS_PER_PAGE, CHILDREN_SHOWN, LEDGER_PAGE, OTHERS_SHOWN
from agentfsm.ui._source import CALLS_PER_PAGE, INBOX_RUNS
from agentfsm.ui._words import (
    JSON_BUDGET,
    MAX_LISTED,
    RECORD_VIEW_ACTIONS,
    clipped,
    pretty_json,
    record_view,
    stop_words,
)
from agentfsm.ui.report import MAX_EVENTS, MAX_RUNS
from tests.ui.conftest import CSRF, TOKEN, answer_agent, batch_agent, client, make_batch

MB = 1_000_000
CARD = re.compile(r'<article class="approval" data-run="([^"]+)" data-action="([^"]+)"')
NEXT = re.compile(r'<a rel="next" href="([^"]+)"')


def _cards(text: str) -> list[tuple[str, str]]:
    return CARD.findall(text)


def _next(text: str) -> str | None:
    found = NEXT.search(text)
    return html.unescape(found.group(1)) if found else None


def _inbox_pages(c: TestClient, url: str = "/approvals") -> list[list[tuple[str, str]]]:
    """The inbox's pages, following each page's `next` link to the end."""
    pages: list[list[tuple[str, str]]] = []
    next_url: str | None = url
    while next_url is not None:
        text = c.get(next_url).text
        pages.append(_cards(text))
        next_url = _next(text)
        assert len(pages) < 1000, "the inbox's pages do not end"
    return pages


def _timed(c: TestClient, url: str) -> tuple[Any, float]:
    start = time.perf_counter()
    answer = c.get(url)
    return answer, time.perf_counter() - start


def _waiting(path: Path, run_id: str = "batch") -> tuple[str, ...]:
    with SQLiteEventStore(path) as store:
        return store.load(run_id).pending_approvals


@pytest.fixture(scope="module")
def batch_1000(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose one run waits on the 1,000 calls one decision proposed."""
    path = tmp_path_factory.mktemp("batch") / "runs.db"
    make_batch(path, 1000)
    return path


@pytest.fixture(scope="module")
def batch_3000(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose one run waits on 3,000 calls of one decision."""
    path = tmp_path_factory.mktemp("batch3000") / "runs.db"
    make_batch(path, 3000)
    return path


class TestOneBigBatch:
    def test_the_inbox_answers_1000_waiting_calls_under_2_mb_and_1_s(
        self, batch_1000: Path
    ) -> None:
        """A fresh server (nothing cached) answers the inbox of a 1,000-call batch with one
        page of calls, under 2 MB and under a second (the issue's bound)."""
        page, took = _timed(client(batch_1000), "/approvals")
        assert page.status_code == 200
        assert len(page.content) < 2 * MB
        assert took < 1.0
        assert len(_cards(page.text)) == CALLS_PER_PAGE

    def test_the_run_page_answers_a_1000_call_batch_under_2_mb_and_1_s(
        self, batch_1000: Path
    ) -> None:
        """The run's page, first view (its path folded, its diagram drawn): under 2 MB and
        under a second, with one page of its actions."""
        page, took = _timed(client(batch_1000), "/run?id=batch")
        assert page.status_code == 200
        assert len(page.content) < 2 * MB
        assert took < 1.0
        assert len(re.findall(r'<tr data-action="', page.text)) == ACTIONS_PER_PAGE

    def test_3000_calls_leave_every_page_under_2_mb(self, batch_3000: Path) -> None:
        """3,000 calls: every page that shows the run or its calls stays under 2 MB."""
        c = client(batch_3000)
        for url in ("/approvals", "/approvals/count", "/run?id=batch", "/run?id=batch&at=3003",
                    "/run?id=batch&page=1&actions_page=60", "/", "/run/record.json?id=batch"):  # fmt: skip
            answer = c.get(url)
            assert answer.status_code == 200, url
            assert len(answer.content) < 2 * MB, url

    def test_the_inbox_summarises_the_batch_once_per_run(self, batch_1000: Path) -> None:
        """The run's batch is counted by tool and status once, with a few other calls named,
        never every call drawn under every other."""
        text = client(batch_1000).get("/approvals").text
        assert text.count('<section class="inbox-run" data-run="batch">') == 1
        assert "Batch of 1,000 call(s): <code>refund</code> approval_pending 1,000</p>" in text
        assert text.count('<pre class="args">') == CALLS_PER_PAGE
        others = re.search(r'<details class="others"><summary>(\d+) other call', text)
        assert others is not None
        assert int(others.group(1)) == 1000 - CALLS_PER_PAGE
        assert text.count('<code class="args-line">') == OTHERS_SHOWN
        assert f"and {1000 - CALLS_PER_PAGE - OTHERS_SHOWN} more:" in text

    def test_every_waiting_call_is_on_exactly_one_page(self, batch_1000: Path) -> None:
        """Following `next`, the pages hold each waiting call once, in the order the run
        requested them, a full page each."""
        pages = _inbox_pages(client(batch_1000))
        assert [len(p) for p in pages] == [CALLS_PER_PAGE] * (1000 // CALLS_PER_PAGE)
        assert [a for p in pages for _, a in p] == list(_waiting(batch_1000))

    def test_each_form_is_bound_to_its_own_calls_digest(self, batch_1000: Path) -> None:
        """On a later page too, each card's approve and reject forms carry its call's id and
        the digest of that call's arguments."""
        with SQLiteEventStore(batch_1000) as store:
            actions = store.load("batch").actions
        text = client(batch_1000).get("/approvals?after=batch&call=t1.50").text
        for article in re.findall(r'<article class="approval".*?</article>', text, re.DOTALL):
            action_id = re.findall(r'name="action_id" value="([^"]+)"', article)
            digests = re.findall(r'name="digest" value="([^"]+)"', article)
            assert len(set(action_id)) == 1
            assert len(digests) == 2
            assert set(digests) == {actions[action_id[0]].arguments_digest}

    def test_the_polling_answer_is_the_page_the_reader_has(self, batch_1000: Path) -> None:
        """`/approvals/count` with the page's cursor answers that page's keys, no more."""
        c = client(batch_1000)
        text = c.get("/approvals?after=batch&call=t1.100").text
        poll = re.search(r'data-poll-inbox="([^"]+)"', text)
        assert poll is not None
        answer = c.get(html.unescape(poll.group(1))).json()
        keys = sorted(f"{r} {a}" for r, a in _cards(text))
        assert answer == {"count": CALLS_PER_PAGE, "calls": keys}

    def test_where_it_stands_names_a_few_calls(self, batch_1000: Path) -> None:
        """The sentence on where the run stands counts the calls past the first few."""
        with SQLiteEventStore(batch_1000) as store:
            record = store.load("batch")
        assert stop_words(record, DEFAULT_TABLE) == (
            "Waiting for a decision on 1,000 calls: t1.1, t1.2, t1.3, t1.4, t1.5 and 995 more."
        )

    def test_the_actions_table_is_paged(self, batch_1000: Path) -> None:
        """The run page's actions come 50 a page; the pages hold each call once; a page past
        the end shows the last."""
        c = client(batch_1000)
        seen: list[str] = []
        pages = 1000 // ACTIONS_PER_PAGE
        for n in range(1, pages + 1):
            text = c.get(f"/run?id=batch&actions_page={n}").text
            seen += re.findall(r'<tr data-action="([^"]+)">', text)
        assert seen == list(_waiting(batch_1000))
        last = c.get("/run?id=batch&actions_page=999").text
        assert f"actions 951–1000 of 1000 (page {pages} of {pages})" in last


class TestInboxPaging:
    def test_a_call_decided_between_pages_shifts_no_other_call(self, tmp_path: Path) -> None:
        """The pages are keyed by (run, call), not by offset: calls decided after page 1
        loaded, the last one on it included, make page 2 start with the call after it."""
        path = tmp_path / "runs.db"
        make_batch(path, 2 * CALLS_PER_PAGE + 7)
        waiting = _waiting(path)
        c = client(path)
        first = c.get("/approvals").text
        assert [a for _, a in _cards(first)] == list(waiting[:CALLS_PER_PAGE])
        with SQLiteEventStore(path) as store:
            for action_id in (waiting[0], waiting[CALLS_PER_PAGE - 1]):
                control.approve(store, "batch", action_id, "bob")
        next_url = _next(first)
        assert next_url is not None
        second = c.get(next_url).text
        assert [a for _, a in _cards(second)] == list(waiting[CALLS_PER_PAGE : 2 * CALLS_PER_PAGE])

    def test_an_approval_from_a_later_page_is_appended(self, tmp_path: Path) -> None:
        """The form of a call on page 2 approves that call, bound to the digest shown."""
        path = tmp_path / "runs.db"
        make_batch(path, CALLS_PER_PAGE + 3)
        c = client(path)
        c.cookies.set("agentfsm_ui_token", TOKEN)
        second = c.get(_next(c.get("/approvals").text) or "").text
        form = re.search(r'<form method="post" action="/act/approve" class="approve">(.*?)</form>',
                         second, re.DOTALL)  # fmt: skip
        assert form is not None
        fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form.group(1)))
        answer = c.post("/act/approve", data={**fields, "approver": "ann"})
        assert answer.status_code == 200, answer.text
        with SQLiteEventStore(path) as store:
            action = store.load("batch").actions[fields["action_id"]]
        assert (fields["csrf"], fields["action_id"]) == (CSRF, f"t1.{CALLS_PER_PAGE + 1}")
        assert (action.status, action.approver, action.arguments_digest) == (
            "approved", "ann", fields["digest"],
        )  # fmt: skip

    def test_the_outcome_page_names_a_few_of_the_calls_still_waiting(self, tmp_path: Path) -> None:
        """After one approval of a 1,000-call batch, the outcome names five calls still
        waiting and counts the rest."""
        path = tmp_path / "runs.db"
        make_batch(path, 1000)
        c = client(path)
        c.cookies.set("agentfsm_ui_token", TOKEN)
        with SQLiteEventStore(path) as store:
            digest = store.load("batch").actions["t1.1"].arguments_digest
        form = {"csrf": CSRF, "run_id": "batch", "action_id": "t1.1", "digest": digest,
                "approver": "ann"}  # fmt: skip
        answer = c.post("/act/approve", data=form)
        assert answer.status_code == 200
        assert "Still waiting for: t1.2, t1.3, t1.4, t1.5, t1.6 and 994 more." in answer.text
        assert len(answer.content) < 20_000

    def test_the_last_page_says_nothing_more_is_waiting(self, tmp_path: Path) -> None:
        """A page after the last call (its calls decided since) says so and links back."""
        path = tmp_path / "runs.db"
        make_batch(path, 3)
        text = client(path).get("/approvals?after=batch&call=t1.3").text
        assert "No more calls are waiting after those of the previous page." in text
        assert '<a href="/approvals">first page</a>' in text

    def test_a_page_reads_at_most_200_waiting_runs_and_says_where_to_go_on(
        self, tmp_path: Path
    ) -> None:
        """200 runs waiting on a tool, then one waiting on an approval: the first page reads
        the 200 only and says so; its `next` finds the call."""
        path = tmp_path / "runs.db"
        with SQLiteEventStore(path) as store:
            for i in range(INBOX_RUNS):
                log = LogBuilder(f"a{i:03d}")
                log.add("run.started", objective="x", agent="a")
                log.add("model.started")
                calls = [{"action_id": "c1", "tool": "lookup", "arguments": {}}]
                log.add("model.completed", decision="tool_calls", tool_calls=calls)
                log.add("tool.requested", action_id="c1", tool="lookup", arguments={})
                store.append(log.run_id, log.events, 0)
        make_batch(path, 1, run_id="b-last")
        c = client(path)
        first = c.get("/approvals").text
        assert _cards(first) == []
        assert f"No call waits in the runs this page read ({INBOX_RUNS} at most)" in first
        assert _next(first) == f"/approvals?after=a{INBOX_RUNS - 1:03d}"
        assert _cards(c.get(_next(first) or "").text) == [("b-last", "t1.1")]

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        waiting=st.lists(st.integers(0, 2 * CALLS_PER_PAGE + 5), min_size=1, max_size=4),
        limit=st.integers(1, CALLS_PER_PAGE),
    )
    def test_walking_the_pages_yields_every_waiting_call_once(
        self, waiting: list[int], limit: int
    ) -> None:
        """Whatever runs wait on however many calls, and whatever the page size, the pages
        hold every waiting call once, by run and then in request order; each page holds at
        most `limit` calls, and every page but the last exactly `limit`."""
        storage = MemoryStorage()
        source = Source(
            lambda t: MemoryEventStore(storage, options=StoreOptions(reducer=Reducer(t)))
        )
        expected: list[tuple[str, str]] = []
        with structlog.testing.capture_logs():
            for i, calls in enumerate(waiting):
                store = MemoryEventStore(storage)
                run_id = f"run-{i}"
                agent = batch_agent(calls) if calls else answer_agent("done")
                Runner(store, agent).run(run_id, "go")
                expected += [(run_id, a) for a in store.load(run_id).pending_approvals]
        pages: list[list[tuple[str, str]]] = []
        cursor: tuple[str | None, str | None] = (None, None)
        while True:
            page = source.pending(*cursor, limit=limit)
            pages.append([(c.record.run_id, c.action_id) for c in page.calls])
            if page.next_run is None:
                break
            cursor = (page.next_run, page.next_call)
            assert len(pages) <= len(expected) + 1
        assert [k for p in pages for k in p] == expected
        assert all(len(p) == limit for p in pages[:-1])
        assert len(pages[-1]) <= limit


class TestRunPage:
    def test_the_record_after_a_step_keeps_a_few_calls_and_counts_the_rest(
        self, batch_1000: Path
    ) -> None:
        """The record shown after a step keeps its own call, then the first waiting ones,
        and counts what it left out; a small record is shown whole."""
        with SQLiteEventStore(batch_1000) as store:
            record = store.load("batch")
        view = record_view(record, about="t1.700")
        assert list(view["actions"]) == ["t1.700", "t1.1", "t1.2", "t1.3", "t1.4"]
        assert (
            view["batch"] == view["pending_approvals"] == ["t1.1", "t1.2", "t1.3", "t1.4", "t1.5"]
        )
        assert (view["actions_not_shown"], view["batch_not_shown"], view["pending_not_shown"]) == (
            995, 995, 995,
        )  # fmt: skip
        cut = ("actions", "batch", "pending_approvals")
        rest = {k: v for k, v in view.items() if k not in cut and not k.endswith("_not_shown")}
        assert rest == {k: v for k, v in record.to_json().items() if k not in cut}
        few = _first_calls(record, RECORD_VIEW_ACTIONS)
        assert record_view(few, about="t1.1") == few.to_json()

    def test_record_json_pages_a_long_ledger(self, batch_3000: Path) -> None:
        """Past 1,000 calls, `record.json` answers the ledger a page at a time; the pages,
        followed by `actions_next`, are the whole ledger in order."""
        c = client(batch_3000)
        with SQLiteEventStore(batch_3000) as store:
            whole = store.load("batch").to_json()
        ledger: dict[str, Any] = {}
        url: str | None = "/run/record.json?id=batch"
        answers = []
        while url is not None:
            answer = c.get(url).json()
            answers.append(answer)
            assert len(answer["actions"]) <= LEDGER_PAGE
            ledger.update(answer["actions"])
            url = answer["actions_next"]
        assert len(answers) == 3000 // LEDGER_PAGE
        assert list(ledger) == list(whole["actions"])
        assert ledger == whole["actions"]
        assert [a["actions_not_shown"] for a in answers] == [2000, 2000, 2000]
        rest = {
            k: v
            for k, v in answers[0].items()
            if k not in ("actions", "actions_not_shown", "actions_next")
        }
        assert rest == {k: v for k, v in whole.items() if k != "actions"}

    def test_record_json_is_the_record_while_its_ledger_fits(self, batch_1000: Path) -> None:
        """Up to 1,000 calls the answer is `RunRecord.to_json()`, nothing added."""
        with SQLiteEventStore(batch_1000) as store:
            whole = store.load("batch").to_json()
        assert client(batch_1000).get("/run/record.json?id=batch").json() == whole

    def test_a_cursor_naming_no_call_is_a_404(self, batch_1000: Path) -> None:
        """`actions_after=` must name a call of the run."""
        answer = client(batch_1000).get("/run/record.json?id=batch&actions_after=nope")
        assert answer.status_code == 404
        assert "run &#39;batch&#39; has no call &#39;nope&#39;" in answer.text

    def test_what_a_page_cuts_is_there_whole(self, batch_3000: Path) -> None:
        """The timeline cuts the decision of 3,000 calls and links the whole event; each
        call links its whole self."""
        c = client(batch_3000)
        text = c.get("/run?id=batch&page=1").text
        assert '<a href="/run/event.json?id=batch&amp;seq=3">whole event</a>' in text
        assert "more items" in text
        with SQLiteEventStore(batch_3000) as store:
            event = next(iter(store.events("batch", after=2)))
            action = store.load("batch").actions["t1.7"]
        assert c.get("/run/event.json?id=batch&seq=3").json() == event_to_dict(event)
        assert c.get("/run/action.json?id=batch&action=t1.7").json() == action.to_json()
        assert c.get("/run/event.json?id=batch&seq=9999").status_code == 404
        assert c.get("/run/action.json?id=batch&action=nope").status_code == 404

    def test_subagent_runs_are_named_up_to_a_few(self, tmp_path: Path) -> None:
        """A run with more subagent runs than the page names links the runs list for all."""
        path = tmp_path / "runs.db"
        with SQLiteEventStore(path) as store:
            for run_id in ["p", *(f"p/c{i:02d}" for i in range(CHILDREN_SHOWN + 5))]:
                log = LogBuilder(run_id)
                log.add("run.started", objective="x", agent="a")
                store.append(run_id, log.events, 0)
        text = client(path).get("/run?id=p").text
        assert len(re.findall(r'<a href="/run\?id=p%2Fc\d\d">', text)) == CHILDREN_SHOWN
        assert '<a href="/?q=p%2F">every subagent run in the runs list</a>' in text


def _first_calls(record: RunRecord, n: int) -> RunRecord:
    """`record` with only its first `n` calls (a small run's record)."""
    first = dict(itertools.islice(record.actions.items(), n))
    return attrs.evolve(record, actions=first, batch=tuple(first))


class TestReport:
    def test_a_3000_call_batch_makes_a_bounded_file(self, batch_3000: Path) -> None:
        """The review of a run waiting on 3,000 calls lists 2,000 steps, each with a record
        of a few calls, and counts the rest: a few megabytes, not gigabytes."""
        with SQLiteEventStore(batch_3000) as store:
            lines = [dump_event(e) for e in store.events("batch")]
        report = render_report(log=lines)
        assert len(report.encode()) < 10 * MB
        data = re.search(r'<script type="application/json" class="run-data">(.*?)</script>', report)
        assert data is not None
        steps = json.loads(data.group(1))["steps"]
        assert len(steps) == MAX_EVENTS
        assert max(len(s["record"]["actions"]) for s in steps) == RECORD_VIEW_ACTIONS
        assert max(len(json.dumps(s)) for s in steps) < 4 * JSON_BUDGET
        assert f"{len(lines) - MAX_EVENTS:,} later step(s) not listed" in report

    def test_runs_and_lines_past_the_first_are_counted(self) -> None:
        """Runs past the first 20, and lines naming no run past the first 50, are counted."""
        lines = []
        for i in range(MAX_RUNS + MAX_LISTED + 10):
            log = LogBuilder(f"r{i:03d}")
            log.add("run.started", objective="x", agent="a")
            lines.append(dump_event(log.events[0]))
        lines += ["not json"] * (MAX_LISTED + 7)
        report = render_report(log=lines)
        assert report.count('<article class="run"') == MAX_RUNS
        assert report.count('<p class="refused">log: ') == MAX_LISTED + 1
        assert "log: 7 more line(s) that name no run" in report
        named = ", ".join(f"r{i:03d}" for i in range(MAX_RUNS, MAX_RUNS + MAX_LISTED))
        assert f"{MAX_LISTED + 10} more run(s) in the log not shown: {named} and 10 more" in report


class TestRunsList:
    def test_a_logs_unreadable_lines_are_listed_up_to_50(self, tmp_path: Path) -> None:
        """`agentfsm ui --log`: lines that name no run are listed up to 50, then counted."""
        log = LogBuilder("r1")
        log.add("run.started", objective="x", agent="a")
        path = tmp_path / "log.jsonl"
        path.write_text("\n".join([dump_event(log.events[0]), *["not json"] * (MAX_LISTED + 9)]))
        config = UIConfig(token="t" * 20, read_only=True, allowed_hosts=("testserver",))
        text = TestClient(create_app(LogSource(path), config)).get("/").text
        assert text.count('<p class="refused">log: line ') == MAX_LISTED
        assert '<p class="refused">log: 9 more line(s) that name no run</p>' in text


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=200,
)


class TestClipped:
    @given(value=_json, budget=st.integers(0, 500))
    def test_what_is_not_cut_is_the_value(self, value: Any, budget: int) -> None:
        """`clipped` says it cut exactly when what it returns is not the value."""
        shown, cut = clipped(value, budget)
        assert cut == (shown != value)

    @given(value=_json, budget=st.integers(0, 500))
    def test_the_text_is_bounded_by_the_budget(self, value: Any, budget: int) -> None:
        """However large the value, the page's text is a bounded multiple of the budget
        (JSON escapes a control character in six)."""
        assert len(pretty_json(value, budget)) <= 6 * budget + 400

    def test_a_value_that_fits_is_not_cut(self) -> None:
        """A call's usual arguments come through whole; a number past the budget is shown
        whole, and not said to be cut."""
        value = {"order": "O-1", "amount": 40, "lines": [{"sku": "A", "n": 2}]}
        assert clipped(value) == (value, False)
        assert clipped(123456789, 3) == (123456789, False)

    def test_huge_values_are_cut_and_say_how_much(self) -> None:
        """A megabyte string, 100,000 items, 100,000 keys: each cut where it was, saying
        how much is left out."""
        text, cut = clipped("x" * 1_000_000, 100)
        assert cut
        assert text == "x" * 98 + "… (999,902 more characters)"
        items, cut = clipped(list(range(100_000)), 100)
        assert cut
        assert items[-1] == f"… {100_000 - len(items) + 1:,} more items"
        keys, cut = clipped({f"k{i}": i for i in range(100_000)}, 100)
        assert cut
        assert keys["…"] == f"{100_000 - len(keys) + 1:,} more keys"


def test_the_report_states_its_caps_where_users_read_them() -> None:
    """The caps are not exported; `render_report`'s docstring (the API reference) says them,
    and says them right."""
    from agentfsm.ui import render_report

    doc = " ".join((render_report.__doc__ or "").split())
    assert f"up to {MAX_RUNS};" in doc
    assert f"its first {MAX_EVENTS:,} steps" in doc
