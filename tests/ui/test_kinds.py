"""What the pages say of a run reads its state's kind in the run's table: a run of the loan
lifecycle that ended in `approved` is ended on the runs list too (it said `In progress
('approved')` there while its own page said it ended), and a run waiting in a state of the
lifecycle's own says for what."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
import structlog
from starlette.testclient import TestClient

from agentfsm import Runner, SQLiteEventStore, State, Transition
from agentfsm.events import step_clock
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import append_event
from agentfsm.stores.base import StoreOptions
from agentfsm.ui import Source, UIConfig, create_app
from agentfsm.ui._security import COOKIE
from agentfsm.ui._words import stop_words
from tests.fixtures.loan import LOAN_TABLE, loan_runs, review_agent
from tests.ui.conftest import TOKEN, opener

#: What each loan run's words are, on the runs list and on its page alike.
WORDS = {
    "loan-docs": "Waiting in 'documents_requested': the applicant is asked for documents; "
    "the run waits for them.",
    "loan-no": "Ended in 'declined': the underwriter declined the loan.",
    "loan-ok": "Ended in 'approved': the underwriter approved the loan.",
    "loan-review": "Paused: the applicant's bank statement is unreadable.",
    "loan-uw": "Waiting in 'underwriting': an underwriter decides on the loan.",
}


@pytest.fixture
def loans(tmp_path: Path) -> Path:
    path = tmp_path / "loans.db"
    options = StoreOptions(reducer=Reducer(LOAN_TABLE))
    with structlog.testing.capture_logs(), SQLiteEventStore(path, options=options) as store:
        loan_runs(store)
    return path


def _client(path: Path) -> TestClient:
    source = Source(opener(path), tables=[LOAN_TABLE], label=str(path))
    config = UIConfig(token=TOKEN, allowed_hosts=("testserver",))
    return TestClient(create_app(source, config), raise_server_exceptions=False)


def test_the_words_of_each_stage(loans: Path) -> None:
    """Ended, waiting (for what its state says), paused, by the state's kind."""
    options = StoreOptions(reducer=Reducer(LOAN_TABLE))
    with SQLiteEventStore(loans, options=options) as store:
        said = {i.run_id: stop_words(store.load(i.run_id), LOAN_TABLE) for i in store.runs()}
    assert said == WORDS


def test_the_runs_list_says_what_each_run_page_says(loans: Path) -> None:
    """Each row's words are the words its run page shows."""
    ui = _client(loans)
    listed = re.findall(
        r'<tr data-run="([^"]+)">.*?<td class="words">([^<]*)</td>', ui.get("/").text, re.DOTALL
    )
    assert {run: html.unescape(words) for run, words in listed} == WORDS
    for run_id, words in WORDS.items():
        page = ui.get(f"/run?id={run_id}").text
        found = re.findall(r'<p class="words">([^<]*)</p>', page)
        assert [html.unescape(w) for w in found] == [words]


#: The loan table with a paused state of its own: a person puts an application on hold.
ON_HOLD = LOAN_TABLE.derive(
    name="loan_on_hold",
    add_states=[State("on_hold", kind="paused", description="a person put it on hold")],
    add_events=["loan.put_on_hold"],
    add=[
        Transition("running", "loan.put_on_hold", "on_hold"),
        Transition("on_hold", "run.resumed", "running"),
        Transition("on_hold", "run.failed", "failed"),
    ],
)


def test_a_run_in_a_paused_state_of_its_own_offers_resume(tmp_path: Path) -> None:
    """The run page offers to resume a run whose state is of the `paused` kind, whatever
    the state's name, and says it is paused."""
    path = tmp_path / "hold.db"
    options = StoreOptions(reducer=Reducer(ON_HOLD))
    with structlog.testing.capture_logs(), SQLiteEventStore(path, options=options) as store:
        Runner(store, review_agent(), clock=step_clock()).run("loan-1", "review")
        append_event(store, "loan-1", "loan.documents_received", document_ids=["p-1"])
        append_event(store, "loan-1", "loan.put_on_hold")
    source = Source(opener(path), tables=[ON_HOLD], label=str(path))
    ui = TestClient(create_app(source, UIConfig(token=TOKEN, allowed_hosts=("testserver",))))
    ui.cookies.set(COOKIE, TOKEN)
    page = ui.get("/run?id=loan-1").text
    assert re.findall(r'<p class="words">([^<]*)</p>', page) == ["Paused in &#39;on_hold&#39;."]
    assert 'action="/act/resume"' in page
    assert 'action="/act/pause"' not in page
