"""The UI over a PostgreSQL store: the same pages and the same approval path as on SQLite."""

from __future__ import annotations

import re

import structlog
from starlette.testclient import TestClient

from agentfsm import Runner
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores.base import EventStore, StoreOptions
from agentfsm.ui import Source, UIConfig, create_app
from agentfsm.ui._security import COOKIE
from tests.ui.conftest import CSRF, TOKEN, answer_agent, refund_agent


def test_runs_a_runner_made_on_postgres_are_listed_shown_and_approved(
    postgres_dsn: str, pg_prefix: str
) -> None:
    """Runs made by a Runner on PostgreSQL are listed and shown; the waiting call is in the
    inbox, and approving it from the UI writes `approval.accepted` to the store."""
    from agentfsm.stores.postgres import PostgresEventStore

    def opener(table: TransitionTable) -> EventStore:
        options = StoreOptions(reducer=Reducer(table))
        return PostgresEventStore(
            postgres_dsn, options=options, table_prefix=pg_prefix, migrate=True
        )

    with structlog.testing.capture_logs():
        store = opener(Reducer().table)
        Runner(store, answer_agent("hello")).run("done-1", "Say hello")
        Runner(store, refund_agent()).run("pay-1", "Refund order O-1")
    app = create_app(
        Source(opener, label="postgresql://test"),
        UIConfig(token=TOKEN, allowed_hosts=("testserver",)),
    )
    with TestClient(app, raise_server_exceptions=False) as ui:  # its lifespan closes handles
        _listed_shown_and_approved(ui, store)
    store.close()


def _listed_shown_and_approved(ui: TestClient, store: EventStore) -> None:
    ui.cookies.set(COOKIE, TOKEN)
    listed = ui.get("/")
    assert listed.status_code == 200
    assert re.search(r"done-1.*completed", listed.text, re.S)
    assert re.search(r"pay-1.*waiting_approval", listed.text, re.S)
    assert "Refund order O-1" in ui.get("/run", params={"id": "pay-1"}).text
    inbox = ui.get("/approvals")
    digest = re.search(r"sha256:[0-9a-f]{64}", inbox.text)
    assert digest is not None
    action = store.load("pay-1").pending_approvals[0]
    form = {
        "csrf": CSRF,
        "run_id": "pay-1",
        "action_id": action,
        "digest": digest.group(0),
        "approver": "ann",
    }
    assert ui.post("/act/approve", data=form).status_code == 200
    decided = store.load("pay-1").actions[action]
    assert (decided.status, decided.approver) == ("approved", "ann")
