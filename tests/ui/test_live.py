"""Live pages by server-sent events (issue 29, item 4), over a real server on loopback: what
the streams send, and what bounds them (the cap, the heartbeat, the end, the read handles,
the security checks). The browser side is tests/ui/test_browser_live.py."""

from __future__ import annotations

import html
import json
import queue
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from agentfsm import Runner, SQLiteEventStore
from agentfsm.runtime import control
from agentfsm.ui import LiveConfig
from agentfsm.ui._live import message
from tests.ui.conftest import LiveServer, answer_agent, refund_agent

#: Fast ticks for tests: a stream looks at the store every 50 ms.
FAST = LiveConfig(tick=0.05, heartbeat=0.3, max_streams=4)


class Reader:
    """A stream read on a thread of its own: its events (name, data) and comments, queued."""

    def __init__(self, url: str, **headers: str) -> None:
        self.items: queue.Queue[tuple[str, str]] = queue.Queue()
        self.status: int | None = None
        self.ended = threading.Event()
        self._stop = threading.Event()
        self._opened = threading.Event()
        self.thread = threading.Thread(target=self._read, args=(url, headers), daemon=True)
        self.thread.start()
        assert self._opened.wait(10), "the stream did not answer"

    def _read(self, url: str, headers: dict[str, str]) -> None:
        try:
            with httpx.stream("GET", url, headers=headers, timeout=20) as r:
                self.status = r.status_code
                self._opened.set()
                event, data = "message", []
                for line in r.iter_lines():
                    if self._stop.is_set():
                        return
                    if line.startswith(":"):
                        self.items.put(("comment", line))
                    elif line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        data.append(line[6:])
                    elif line.startswith(("retry: ", "id: ")):
                        self.items.put((line.split(":")[0], line.split(": ", 1)[1]))
                    elif line == "" and data:
                        self.items.put((event, "\n".join(data)))
                        event, data = "message", []
        except httpx.HTTPError:
            pass
        finally:
            self._opened.set()
            self.ended.set()

    def next(self, name: str, timeout: float = 10) -> str:
        """The data of the next event called `name` (others before it are skipped)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                event, data = self.items.get(timeout=left)
            except queue.Empty:
                break
            if event == name:
                return data
        raise AssertionError(f"no {name!r} event within {timeout} s")

    def close(self) -> None:
        self._stop.set()


@pytest.fixture
def server(runs_db: Path) -> Iterator[LiveServer]:
    live = LiveServer(runs_db, live=FAST)
    yield live
    live.stop()


def _stream_url(server: LiveServer, page: str) -> str:
    found = re.search(r'data-stream="([^"]+)"', httpx.get(server.url + page).text)
    assert found is not None, f"{page} names no stream"
    return server.url + html.unescape(found.group(1))


def _open(server: LiveServer) -> int:
    return int(server.app.state.streams.open)


def _until(check: Any, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def _finish_pay_1(path: Path) -> None:
    with SQLiteEventStore(path) as store:
        control.approve(store, "pay-1", "t1.1", "bob")
    with structlog.testing.capture_logs(), SQLiteEventStore(path) as store:
        Runner(store, refund_agent()).drive("pay-1")


class TestWhatStreamsSend:
    def test_a_runs_new_events_come_as_timeline_rows_and_its_state(
        self, server: LiveServer, runs_db: Path
    ) -> None:
        """Once the run moves on, its page's stream sends the turn groups holding the new
        events (rows server-rendered and escaped) and the run's version and status, with the
        last event shown as the event id."""
        reader = Reader(_stream_url(server, "/run?id=pay-1"))
        try:
            assert reader.next("retry") == "1000"
            _finish_pay_1(runs_db)
            rows = reader.next("rows")
            state = json.loads(reader.next("run"))
            while state["version"] < 11:  # the resume's batches may come as two looks
                state = json.loads(reader.next("run"))
        finally:
            reader.close()
        assert re.findall(r'data-seq="(\d+)"', rows)[0] == "2"  # turn 1 whole, new rows too
        assert 'data-seq="5"' in rows
        assert "<script>" not in rows  # the XSS payload in the call's arguments, escaped
        assert state == {"version": 11, "status": "completed", "shown": 11, "more": False}

    def test_a_reconnect_resumes_after_the_last_event_id(
        self, server: LiveServer, runs_db: Path
    ) -> None:
        """`Last-Event-ID` (which the browser sends when it reopens a stream) moves the
        cursor on: what the page has already is not sent again."""
        _finish_pay_1(runs_db)
        url = f"{server.url}/run/stream?id=pay-1&after=4&until=100"
        reader = Reader(url, **{"last-event-id": "11"})
        try:
            said = []
            while (item := reader.items.get(timeout=10))[0] != "comment":  # the heartbeat
                said.append(item[0])
        finally:
            reader.close()
        assert said == ["retry"]  # several looks, and nothing after event 11 to send

    def test_past_the_pages_end_the_page_is_told_the_run_moved_on(
        self, server: LiveServer, runs_db: Path
    ) -> None:
        """A page whose timeline is full (an earlier page, a step) gets no rows, only the
        run's state, saying there is more."""
        reader = Reader(f"{server.url}/run/stream?id=pay-1&after=4&until=0")
        try:
            _finish_pay_1(runs_db)
            state = json.loads(reader.next("run"))
        finally:
            reader.close()
        assert (state["shown"], state["more"]) == (4, True)
        assert all(name != "rows" for name, _ in list(reader.items.queue))

    def test_the_runs_list_sends_its_rows_and_counts_again_once_a_run_moved(
        self, server: LiveServer, runs_db: Path
    ) -> None:
        """The list's stream sends its rows (and counts) as the page shows them, then again
        when a run on the page moves or a new one comes first."""
        reader = Reader(_stream_url(server, "/"))
        try:
            first = reader.next("rows")
            assert re.findall(r'<tr data-run="([^"]+)">', first) == ["pay-1", "done-2", "done-1"]
            assert "3 shown, 3 read from the index" in reader.next("pager")
            assert "<strong>3</strong> runs in all" in reader.next("counts")
            with structlog.testing.capture_logs(), SQLiteEventStore(runs_db) as store:
                Runner(store, answer_agent("new")).run("zz-new", "A new run")
            later = reader.next("rows")
        finally:
            reader.close()
        assert re.findall(r'<tr data-run="([^"]+)">', later) == [
            "zz-new",
            "pay-1",
            "done-2",
            "done-1",
        ]

    def test_the_inbox_sends_the_calls_that_came_and_those_gone(
        self, server: LiveServer, runs_db: Path
    ) -> None:
        """The inbox's stream says which calls its page has, then the sections of calls
        that came (with their forms) and the keys of those no longer waiting."""
        reader = Reader(_stream_url(server, "/approvals"))
        try:
            assert json.loads(reader.next("keys")) == ["pay-1 t1.1"]
            with structlog.testing.capture_logs(), SQLiteEventStore(runs_db) as store:
                Runner(store, refund_agent()).run("pay-2", "Refund order O-2")
            came = reader.next("calls")
            _finish_pay_1(runs_db)
            gone = json.loads(reader.next("gone"))
        finally:
            reader.close()
        assert re.findall(r'<article class="approval" data-run="([^"]+)"', came) == ["pay-2"]
        assert 'action="/act/approve"' in came
        assert gone == ["pay-1 t1.1"]

    def test_a_message_is_framed_as_the_format_says(self) -> None:
        """Each line of the data its own `data:` line (CR, LF and CRLF end lines; U+2028
        does not), JSON for what is not text, the id before the data."""
        assert message("rows", "a\nb\r\nc\rd\u2028e", id="7") == (
            "event: rows\nid: 7\ndata: a\ndata: b\ndata: c\ndata: d\u2028e\n\n"
        )
        assert message("run", {"version": 3}) == 'event: run\ndata: {"version":3}\n\n'


class TestWhatBoundsThem:
    def test_a_quiet_stream_sends_a_heartbeat_comment(self, server: LiveServer) -> None:
        reader = Reader(f"{server.url}/run/stream?id=done-1&after=3&until=100")
        try:
            assert reader.next("comment", timeout=5) == ": still here"
        finally:
            reader.close()

    def test_past_the_cap_a_stream_is_refused_and_a_closed_one_gives_its_place_back(
        self, server: LiveServer
    ) -> None:
        """Four streams at most here: the fifth is a 503 that says the page polls; once a
        client goes away its stream ends and the count goes down."""
        url = f"{server.url}/run/stream?id=done-1&after=3&until=100"
        readers = [Reader(url) for _ in range(4)]
        try:
            _until(lambda: _open(server) == 4)
            refused = httpx.get(url, timeout=5)
            assert (refused.status_code, refused.headers["retry-after"]) == (503, "30")
            assert refused.text == (
                "4 live streams are open, the most this server keeps: the page polls instead"
            )
        finally:
            for r in readers:
                r.close()
        _until(lambda: _open(server) == 0)

    def test_another_sites_page_and_another_host_are_refused(self, server: LiveServer) -> None:
        """A stream opened from another site's page (its `Origin`) is refused before it
        counts, so no page elsewhere can use the cap up; a Host this server was not
        started for is not answered, as for every page."""
        url = f"{server.url}/runs/stream"
        evil = httpx.get(url, headers={"origin": "http://evil.example"}, timeout=5)
        assert (
            evil.status_code,
            "only for this server's own pages" in html.unescape(evil.text),
        ) == (403, True)
        host = httpx.get(url, headers={"host": "evil.example"}, timeout=5)
        assert host.status_code == 400
        assert _open(server) == 0
        mine = Reader(url, origin=server.url)
        try:
            assert mine.status == 200
        finally:
            mine.close()

    def test_idle_streams_hold_no_read_handle(self, runs_db: Path) -> None:
        """With one store handle for the whole server, three open streams leave it free:
        each look borrows it for its read alone, so pages are still answered."""
        server = LiveServer(runs_db, live=FAST, readers=1)
        url = f"{server.url}/run/stream?id=done-1&after=3&until=100"
        readers = [Reader(url) for _ in range(3)]
        try:
            _until(lambda: _open(server) == 3)
            for _ in range(5):
                assert httpx.get(f"{server.url}/run?id=done-2", timeout=5).status_code == 200
        finally:
            for r in readers:
                r.close()
            server.stop()

    def test_stopping_the_server_ends_its_open_streams(self, runs_db: Path) -> None:
        """uvicorn waits for open answers when it stops: the streams end first."""
        server = LiveServer(runs_db, live=LiveConfig(tick=0.05, heartbeat=60))
        reader = Reader(f"{server.url}/runs/stream")
        started = time.monotonic()
        server.stop()
        assert reader.ended.wait(5)
        assert time.monotonic() - started < 3
        assert not server.thread.is_alive()

    def test_a_stream_ends_after_its_lifetime_for_the_browser_to_reopen(
        self, runs_db: Path
    ) -> None:
        server = LiveServer(runs_db, live=LiveConfig(tick=0.05, lifetime=0.3))
        try:
            reader = Reader(f"{server.url}/runs/stream")
            assert reader.ended.wait(5)
            _until(lambda: _open(server) == 0)
        finally:
            server.stop()

    def test_with_streams_off_pages_name_none_and_poll(self, runs_db: Path) -> None:
        server = LiveServer(runs_db, live=LiveConfig(tick=0))
        try:
            page = httpx.get(f"{server.url}/run?id=pay-1").text
            assert "data-stream=" not in page
            assert "data-poll-version=" in page
            off = httpx.get(f"{server.url}/runs/stream", timeout=5)
            assert off.status_code == 404
        finally:
            server.stop()

    def test_a_bad_config_is_refused_in_one_sentence(self) -> None:
        with pytest.raises(ValueError, match="LiveConfig needs tick >= 0"):
            LiveConfig(heartbeat=0)
