"""What the server keeps of what it rendered (issue 32: rendering was half its work per
request): run pages and the inbox by everything they are drawn from, the runs list's rows by
what each row shows, run diagrams by their path. Each is bounded by bytes and by count, and
none serves a page older than the store: each test appends and looks again."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st
from starlette.testclient import TestClient

from agentfsm import DEFAULT_TABLE, SQLiteEventStore
from agentfsm.runtime import control
from agentfsm.ui import Source
from agentfsm.ui._pool import SizedCache
from agentfsm.ui._svg import Diagram, diagram_bytes, run_diagram
from agentfsm.ui._words import pretty_clipped
from benchmarks.bench_ui import short_run
from tests.ui.conftest import COOKIE, TOKEN, client, make_batch, opener


def _append(path: Path, run_id: str, events: list[Any], version: int) -> None:
    with SQLiteEventStore(path) as store:
        store.append(run_id, events, version)


def _approve(path: Path, run_id: str) -> None:
    with structlog.testing.capture_logs(), SQLiteEventStore(path) as store:
        record = store.load(run_id)
        action_id = record.pending_approvals[0]
        digest = record.actions[action_id].arguments_digest
        control.approve(store, run_id, action_id, "bob", digest=digest)


def _events(text: str) -> str:
    found = re.search(r'<dd id="run-events">(\d+)</dd>', text)
    assert found is not None
    return found.group(1)


class TestRunPages:
    def test_a_run_page_is_rendered_once_per_version(self, runs_db: Path) -> None:
        """The second view of a run that did not move is the first one's bytes, kept once."""
        c = client(runs_db)
        first = c.get("/run?id=done-1")
        second = c.get("/run?id=done-1")
        assert first.status_code == second.status_code == 200
        assert first.content == second.content
        assert len(c.app.state.pages) == 1  # type: ignore[attr-defined]

    def test_an_appended_event_is_on_the_next_view(self, runs_db: Path) -> None:
        """A page kept at version V is never served once the run is at V+1."""
        c = client(runs_db)
        before = c.get("/run?id=pay-1").text
        assert "approval.accepted" not in before
        _approve(runs_db, "pay-1")
        after = c.get("/run?id=pay-1").text
        assert "approval.accepted" in after
        assert int(_events(after)) > int(_events(before))

    def test_a_subagent_run_that_moved_is_shown_as_it_is_now(self, runs_db: Path) -> None:
        """A run's page lists its subagent runs' statuses, which change with no event of the
        run itself: the page is kept under them too."""
        c = client(runs_db)
        child = short_run("done-1/sub", 1)
        _append(runs_db, "done-1/sub", child[:-1], 0)
        with SQLiteEventStore(runs_db) as store:
            running = store.run_info("done-1/sub").status
        assert running != "completed"
        assert f"s-{running}" in c.get("/run?id=done-1").text
        _append(runs_db, "done-1/sub", child[-1:], len(child) - 1)
        now = c.get("/run?id=done-1").text
        assert '<span class="status s-completed">completed</span>, ' in now or (
            'done-1/sub</a> <span class="status s-completed">' in now
        )

    def test_each_reader_gets_the_page_drawn_for_them(self, runs_db: Path) -> None:
        """Who reads (signed in, and as whom behind a proxy) is part of what a page is kept
        under: one reader's page is never another's."""
        c = client(runs_db, identity_header="X-Forwarded-User")
        anonymous = c.get("/run?id=pay-1").text
        c.cookies.set(COOKIE, TOKEN)
        alice = c.get("/run?id=pay-1", headers={"X-Forwarded-User": "alice"}).text
        bob = c.get("/run?id=pay-1", headers={"X-Forwarded-User": "bob"}).text
        assert "sign in to act" in anonymous
        assert "signed in" not in anonymous
        assert "signed in as alice" in alice
        assert "bob" not in alice
        assert "signed in as bob" in bob
        assert "alice" not in bob

    def test_the_kept_pages_are_bounded_by_bytes_and_by_count(self, runs_db: Path) -> None:
        c = client(runs_db)
        pages: SizedCache[Any, bytes] = c.app.state.pages  # type: ignore[attr-defined]
        one = len(c.get("/run?id=done-1").content)
        pages.max_bytes = 3 * one
        urls = [f"/run?id={r}&at={at}" for r in ("done-1", "done-2", "pay-1") for at in (1, 2, 3)]
        for url in urls:
            assert c.get(url).status_code == 200
            assert pages.bytes <= pages.max_bytes
        assert 1 <= len(pages) <= 3
        pages.max_items = 2
        for url in urls:
            c.get(url)
            assert len(pages) <= 2
        assert pages.bytes <= pages.max_bytes


class TestInbox:
    def test_the_inbox_is_rendered_once_while_nothing_changed(self, runs_db: Path) -> None:
        c = client(runs_db)
        first = c.get("/approvals")
        assert first.content == c.get("/approvals").content
        assert len(c.app.state.pages) == 1  # type: ignore[attr-defined]

    def test_a_decided_call_leaves_and_a_new_one_comes(self, runs_db: Path) -> None:
        c = client(runs_db)
        assert 'data-run="pay-1"' in c.get("/approvals").text
        _approve(runs_db, "pay-1")
        make_batch(runs_db, 2, run_id="later")
        now = c.get("/approvals").text
        assert 'data-run="pay-1"' not in now
        assert 'data-run="later"' in now


class TestRunsListRows:
    def test_each_row_is_rendered_once_while_its_run_stands_still(self, runs_db: Path) -> None:
        c = client(runs_db)
        rows: SizedCache[Any, str] = c.app.state.rows  # type: ignore[attr-defined]
        first = c.get("/").text
        assert len(rows) == 3
        assert c.get("/").text == first
        assert len(rows) == 3

    def test_a_run_that_moved_is_shown_as_it_is_now(self, runs_db: Path) -> None:
        c = client(runs_db)
        events = short_run("moving", 1)
        _append(runs_db, "moving", events[:-1], 0)
        before = c.get("/").text
        assert re.search(r'data-run="moving">.*?data-label="events">3<', before, re.S)
        _append(runs_db, "moving", events[-1:], len(events) - 1)
        after = c.get("/").text
        row = re.search(r'<tr data-run="moving">.*?</tr>', after, re.S)
        assert row is not None
        assert 'data-label="events">4<' in row.group(0)
        assert "s-completed" in row.group(0)

    def test_the_kept_rows_are_bounded_by_bytes_and_by_count(self, runs_db: Path) -> None:
        c = client(runs_db)
        rows: SizedCache[Any, str] = c.app.state.rows  # type: ignore[attr-defined]
        rows.max_items = 2
        page = c.get("/").text
        assert len(rows) <= 2
        assert page.count("<tr data-run=") == 3  # every row shown, kept or not
        fresh = client(runs_db)
        tiny: SizedCache[Any, str] = fresh.app.state.rows  # type: ignore[attr-defined]
        tiny.max_bytes = 1
        assert fresh.get("/").text == page
        assert len(tiny) == 0
        assert tiny.bytes == 0


class TestRunDiagrams:
    def _trajectory(self, path: Path, run_id: str) -> Any:
        return Source(opener(path)).path(run_id).trajectory

    def test_runs_that_went_the_same_way_share_one_drawing(self, runs_db: Path) -> None:
        """done-1 and done-2 took the same moves: one picture, which names neither (the
        page's heading names the run)."""
        drawn: SizedCache[Any, Diagram] = SizedCache(16, 2**24, diagram_bytes)
        a = run_diagram(DEFAULT_TABLE, self._trajectory(runs_db, "done-1"), path_only=True,
                        drawn=drawn)[0]  # fmt: skip
        b = run_diagram(DEFAULT_TABLE, self._trajectory(runs_db, "done-2"), path_only=True,
                        drawn=drawn)[0]  # fmt: skip
        assert a.svg is not None
        assert a is b
        assert len(drawn) == 1
        assert "this run" in a.svg
        assert "done-1" not in a.svg
        whole = run_diagram(DEFAULT_TABLE, self._trajectory(runs_db, "done-1"), path_only=False,
                            drawn=drawn)[0]  # fmt: skip
        assert whole is not a
        assert len(drawn) == 2

    def test_a_run_that_moved_on_is_drawn_again(self, runs_db: Path) -> None:
        drawn: SizedCache[Any, Diagram] = SizedCache(16, 2**24, diagram_bytes)
        events = short_run("moving", 1)
        _append(runs_db, "moving", events[:-1], 0)
        before = run_diagram(DEFAULT_TABLE, self._trajectory(runs_db, "moving"), path_only=True,
                             drawn=drawn)[0]  # fmt: skip
        _append(runs_db, "moving", events[-1:], len(events) - 1)
        after = run_diagram(DEFAULT_TABLE, self._trajectory(runs_db, "moving"), path_only=True,
                            drawn=drawn)[0]  # fmt: skip
        assert before.svg is not None
        assert after.svg is not None
        assert 'data-state="completed"' in after.svg
        assert 'data-state="completed"' not in before.svg
        assert len(drawn) == 2

    def test_the_drawings_kept_are_bounded_by_bytes(self, runs_db: Path) -> None:
        first = run_diagram(DEFAULT_TABLE, self._trajectory(runs_db, "done-1"), path_only=True,
                            drawn=SizedCache(16, 2**24, diagram_bytes))[0]  # fmt: skip
        drawn: SizedCache[Any, Diagram] = SizedCache(16, diagram_bytes(first) + 1, diagram_bytes)
        for run_id in ("done-1", "pay-1"):
            for path_only in (True, False):
                run_diagram(DEFAULT_TABLE, self._trajectory(runs_db, run_id),
                            path_only=path_only, drawn=drawn)[0]  # fmt: skip
                assert drawn.bytes <= drawn.max_bytes
                assert len(drawn) <= 1

    def test_a_long_run_id_the_note_wraps_is_drawn_for_that_run(self, runs_db: Path) -> None:
        """The id is taken out only where it is whole; a wrapped one stays, and is right."""
        run_id = "r" + "x" * 80
        _append(runs_db, run_id, short_run(run_id, 1), 0)
        drawn: SizedCache[Any, Diagram] = SizedCache(16, 2**24, diagram_bytes)
        found = run_diagram(DEFAULT_TABLE, self._trajectory(runs_db, run_id), path_only=True,
                            drawn=drawn)[0]  # fmt: skip
        assert found.svg is not None
        assert len(drawn) == 1


@pytest.fixture
def signed(runs_db: Path) -> TestClient:
    c = client(runs_db)
    c.cookies.set(COOKIE, TOKEN)
    return c


def test_a_decision_from_the_page_is_on_the_next_view(signed: TestClient) -> None:
    """The server's own append (an approval from the inbox) shows on the next view."""
    from tests.ui.conftest import CSRF

    page = signed.get("/run?id=pay-1").text
    assert "approval.accepted" not in page
    with SQLiteEventStore(Path(signed.app.state.source.label)) as store:  # type: ignore[attr-defined]
        record = store.load("pay-1")
    action_id = record.pending_approvals[0]
    done = signed.post("/act/approve", data={
        "csrf": CSRF, "run_id": "pay-1", "action_id": action_id, "approver": "bob",
        "digest": record.actions[action_id].arguments_digest,
    })  # fmt: skip
    assert done.status_code == 200
    assert "approval.accepted" in signed.get("/run?id=pay-1").text


class TestListAndTablePages:
    def test_the_runs_list_is_drawn_once_while_the_store_stands_still(self, runs_db: Path) -> None:
        c = client(runs_db)
        first = c.get("/?sort=oldest")
        assert first.content == c.get("/?sort=oldest").content
        assert len(c.app.state.pages) == 1  # type: ignore[attr-defined]

    def test_a_new_run_is_on_the_next_view_of_the_list(self, runs_db: Path) -> None:
        c = client(runs_db)
        assert 'data-run="newcomer"' not in c.get("/").text
        _append(runs_db, "newcomer", short_run("newcomer", 1), 0)
        assert 'data-run="newcomer"' in c.get("/").text

    def test_a_table_page_is_drawn_once(self, runs_db: Path) -> None:
        c = client(runs_db)
        url = f"/table?digest={DEFAULT_TABLE.digest}"
        first = c.get(url)
        assert first.status_code == 200
        assert first.content == c.get(url).content
        assert len(c.app.state.pages) == 1  # type: ignore[attr-defined]


#: The timeline row as the template drew it before `_html.timeline_rows` (the reference).
_ROW_TEMPLATE = """    {% for t in rows %}
    <tr class="{{ 'at' if t.sequence == at and stepping else '' }}" data-seq="{{ t.sequence }}" data-type="{{ t.type }}" data-action="{{ t.action_id or '' }}">
      <td class="num"><a href="{{ url('/run', id=run_id, at=t.sequence, view='table' if whole_table else none) }}#step">{{ t.sequence }}</a></td>
      <td><code>{{ t.type }}</code></td>
      <td>{% if t.move %}<code>{{ t.move.source }}</code> → <code>{{ t.move.target }}</code>{% if t.move.condition %} <span class="muted">[{{ t.move.condition }}]</span>{% endif %}{% endif %}</td>
      <td class="time"><time datetime="{{ t.occurred_at }}" title="{{ t.occurred_at }}">{{ t.relative or t.occurred_at }}</time></td>
      <td>{% if t.fields %}<details class="fields"><summary>{{ t.fields|length }} field(s)</summary><pre class="fields">{{ t.fields|json }}</pre></details>{% if t.cut %}<a href="{{ url('/run/event.json', id=run_id, seq=t.sequence) }}">whole event</a>{% endif %}{% endif %}</td>
    </tr>
    {% endfor %}"""


@pytest.mark.parametrize(("at", "stepping", "whole_table"), [(None, False, False), (2, True, True)])
def test_timeline_rows_are_the_templates_markup(
    runs_db: Path, at: int | None, stepping: bool, whole_table: bool
) -> None:
    """The rows written in Python are byte for byte what the template wrote, escaping
    included (pay-1's arguments and objective hold markup; a run id that needs quoting)."""
    from jinja2 import Environment

    from agentfsm.ui import _pages
    from agentfsm.ui._html import timeline_rows
    from agentfsm.ui._words import pretty_json
    from agentfsm.ui.app import _url

    _append(runs_db, 'odd "id" <&>', short_run('odd "id" <&>', 1), 0)
    env = Environment(autoescape=True)
    env.filters["json"] = pretty_json
    reference = env.from_string(_ROW_TEMPLATE)
    source = Source(opener(runs_db))
    for run_id in ("pay-1", 'odd "id" <&>'):
        rows = _pages.run_page(source, run_id, None, at, None, whole_table)["timeline"]
        assert rows
        expected = reference.render(
            rows=rows, run_id=run_id, at=at, stepping=stepping, whole_table=whole_table, url=_url
        )
        assert "    " + timeline_rows(rows, run_id, at, stepping, whole_table) == expected


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=60),
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=12), inner, max_size=6)
    ),
    max_leaves=40,
)


@given(value=_JSON, budget=st.integers(min_value=0, max_value=600))
def test_plain_json_dumped_once_is_what_the_walk_writes(value: Any, budget: int) -> None:
    """The fast path for plain JSON (dumped once when it fits) writes exactly what walking
    it first writes, and says it cut nothing exactly when the walk cut nothing."""
    assert pretty_clipped(value, budget, plain=True) == pretty_clipped(value, budget)


def test_which_drawing_a_run_version_is_stays_bounded(
    runs_db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The map from (run, version, view) to its drawing holds keys only, bounded by count;
    a run that moved on is a new key, so it is drawn for its new path."""
    from agentfsm.ui import _pages

    kept: SizedCache[Any, Any] = SizedCache(2, 2, lambda _: 1)
    monkeypatch.setattr(_pages, "_drawing_of", kept)
    c = client(runs_db)
    for run_id in ("done-1", "done-2", "pay-1"):
        for view in ("", "&view=table"):
            assert c.get(f"/run?id={run_id}{view}").status_code == 200
            assert len(kept) <= 2
    page = c.get("/run?id=pay-1").text
    _approve(runs_db, "pay-1")
    assert c.get("/run?id=pay-1").text != page
    assert len(kept) <= 2
    assert kept.get(("pay-1", int(_events(c.get("/run?id=pay-1").text)), True)) is not None
