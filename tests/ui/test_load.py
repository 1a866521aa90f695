"""The UI under load (issue 32): no per-request delay on a kept-open connection, pages read
in parallel, caches bounded by bytes."""

from __future__ import annotations

import gc
import http.client
import socket
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm import SQLiteEventStore
from agentfsm.events.models import Event
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.registry import _read_published
from agentfsm.fsm.table import TransitionTable
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores.base import EventStore, StoreOptions
from agentfsm.ui import Source
from agentfsm.ui._pages import READING, run_page
from agentfsm.ui._pool import Reads, SizedCache, record_bytes
from agentfsm.ui._server import SWITCH_INTERVAL
from agentfsm.ui._source import (
    _FOLD_ON_AT_MOST,
    _PAUSE_AT_MOST,
    _PAUSE_EVERY,
    ROW_WAIT,
    InboxPage,
    RunsPage,
    _path_bytes,
)
from benchmarks.bench_ui import long_run
from tests.ui.conftest import LiveServer, make_runs, opener


class TestNoDelay:
    """The UI's own socket is a TCP one, so asyncio turns Nagle's algorithm off on every
    connection it accepts (without it, each request on a kept-open connection waited ~40 ms
    for the client's delayed ACK)."""

    def test_the_bound_socket_names_tcp(self) -> None:
        """`bind` makes its socket with IPPROTO_TCP: asyncio sets TCP_NODELAY only then."""
        from agentfsm.ui._server import bind

        sock = bind("127.0.0.1", 0)
        try:
            assert sock.proto == socket.IPPROTO_TCP
        finally:
            sock.close()

    def test_every_accepted_connection_has_nodelay(self, runs_db: Path) -> None:
        """A connection the live server accepted has TCP_NODELAY set on the server's side."""
        server = LiveServer(runs_db)
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
            conn.request("GET", "/tables")
            assert conn.getresponse().read()
            protocols = list(server.server.server_state.connections)
            assert protocols, "the server holds the kept-open connection"
            flags = {
                p.transport.get_extra_info("socket").getsockopt(
                    socket.IPPROTO_TCP, socket.TCP_NODELAY
                )
                for p in protocols
            }
            conn.close()
        finally:
            server.stop()
        assert flags == {1}

    def test_requests_are_parsed_by_httptools(self, runs_db: Path) -> None:
        """The `ui` extra brings httptools, so uvicorn parses HTTP in C, not in pure Python
        (h11) under the GIL the page threads share."""
        server = LiveServer(runs_db)
        try:
            with httpx.Client(base_url=server.url, timeout=10) as c:
                assert c.get("/tables").status_code == 200
                kinds = {type(p).__name__ for p in server.server.server_state.connections}
        finally:
            server.stop()
        assert kinds == {"HttpToolsProtocol"}


def _store_run(
    path: Path,
    run_id: str,
    events: list[Event],
    options: StoreOptions | None = None,
    after: int = 0,
) -> None:
    """Append `events` from event `after + 1` on, 2,000 at a time."""
    with SQLiteEventStore(path, synchronous="NORMAL", options=options) as store:
        for start in range(after, len(events), 2000):
            store.append(run_id, events[start : start + 2000], start)


@pytest.fixture(scope="module")
def heavy_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The runs of `make_runs`, and a run of 20,000 events whose first view takes seconds.

    Stored with no snapshot, so its record is a fold of the whole log too (~0.5 s), as with
    a store that keeps none, or one whose last snapshot is far behind (the store writes them
    further apart as a run's ledger grows: a 60,000-event run's was 28,000 events back)."""
    path = tmp_path_factory.mktemp("heavy") / "runs.db"
    make_runs(path)
    _store_run(path, "heavy", long_run("heavy", 20_000), StoreOptions(snapshot_every=None))
    return path


class _Gate:
    """Real SQLite handles that count their loads and hold one read of run `held` at a gate
    (its `load`, or with `fold`, the reading of its whole log, as a path's fold does), so a
    test can keep that read in flight while other reads come."""

    def __init__(self, path: Path, held: str, *, fold: bool = False) -> None:
        self.path = path
        self.held = held
        self.fold = fold
        self.armed = False
        self.loads: list[str] = []
        self.entered = threading.Event()
        self.open = threading.Event()

    def opener(self) -> Callable[[TransitionTable], EventStore]:
        gate = self

        class Gated(SQLiteEventStore):
            def load(self, run_id: str) -> RunRecord:
                gate.loads.append(run_id)
                if run_id == gate.held and not gate.fold:
                    gate.wait()
                return super().load(run_id)

            def events(self, run_id: str, *, after: int = 0) -> Iterator[Event]:
                # Once, once armed: the held thread's fold (`hold` read the table before).
                if run_id == gate.held and gate.armed and not gate.entered.is_set():
                    gate.wait()
                return super().events(run_id, after=after)

        return lambda table: Gated(
            gate.path, options=StoreOptions(reducer=Reducer(table), cache_size=0)
        )

    def wait(self) -> None:
        self.entered.set()
        self.open.wait(10)

    def hold(self, source: Source) -> threading.Thread:
        """A thread reading the held run (its record, or its path), waiting at the gate."""
        read = source.path if self.fold else source.record
        if self.fold:
            source.table_of(self.held)  # read first: the gate holds the fold alone
            self.armed = True
        thread = threading.Thread(target=read, args=(self.held,))
        thread.start()
        assert self.entered.wait(10)
        return thread


class TestReadsInParallel:
    """Reads take store handles of their own, so a heavy page never holds up a light one."""

    def test_a_light_page_is_served_while_a_heavy_first_view_folds(self, heavy_db: Path) -> None:
        """While the first view of a 20,000-event run folds its log, another person's poll
        of a run's version and a runs list are answered.

        The list shows the heavy run too. Before, it read that run's record again beside
        the first view reading it (no lock held it: two folds of one log under the GIL, each
        at half speed), so it waited for most of the view (light 1.0 s, heavy 2.0 s); now it
        waits a tenth of a second for that read, then draws the row from the index."""
        server = LiveServer(heavy_db)
        done: dict[str, float] = {}
        try:
            started = time.perf_counter()

            def heavy() -> None:
                with httpx.Client(base_url=server.url, timeout=120) as c:
                    assert c.get("/run", params={"id": "heavy"}).status_code == 200
                done["heavy"] = time.perf_counter() - started

            thread = threading.Thread(target=heavy)
            thread.start()
            time.sleep(0.3)  # the heavy request is folding by now (it takes seconds)
            with httpx.Client(base_url=server.url, timeout=120) as c:
                light = time.perf_counter()
                assert c.get("/run/version", params={"id": "done-1"}).status_code == 200
                listed = c.get("/")
                assert listed.status_code == 200
                done["light"] = time.perf_counter() - started
                light = time.perf_counter() - light
            thread.join(120)
        finally:
            server.stop()
        assert done["light"] < done["heavy"], done
        assert light < done["heavy"] / 3, (light, done)
        assert READING in listed.text  # the heavy run's row, drawn from the index

    def test_a_record_two_reads_want_at_once_is_read_once(self, runs_db: Path) -> None:
        """A second read of a record that is being read waits for the first (no second fold
        of the same log to share the GIL with), and both get it."""
        gate = _Gate(runs_db, "done-1")
        source = Source(gate.opener())
        first = gate.hold(source)
        got: list[RunRecord] = []
        second = threading.Thread(target=lambda: got.append(source.record("done-1")))
        second.start()
        second.join(0.3)
        assert second.is_alive(), "the second read waits for the first"
        gate.open.set()
        for t in (first, second):
            t.join(10)
        assert gate.loads == ["done-1"]
        assert [r.run_id for r in got] == ["done-1"]
        source.close()

    @pytest.mark.parametrize("fold", [False, True], ids=["record loading", "path folding"])
    def test_a_runs_list_does_not_wait_long_for_a_record_read_elsewhere(
        self, runs_db: Path, fold: bool
    ) -> None:
        """A row whose record another page is reading (loading it, or folding the path that
        yields it) waits `ROW_WAIT` for it at most, then says what the index says; once the
        read is done, the list shows the record."""
        gate = _Gate(runs_db, "done-1", fold=fold)
        source = Source(gate.opener())
        held = gate.hold(source)
        pages: list[RunsPage] = []
        took = time.perf_counter()
        listing = threading.Thread(target=lambda: pages.append(source.runs_page()))
        listing.start()
        listing.join(ROW_WAIT + 5)
        took = time.perf_counter() - took
        gate.open.set()
        held.join(10)
        assert pages, "the list waited for the held read"
        rows = {r.info.run_id: r for r in pages[0].rows}
        assert rows["done-1"].reading
        assert rows["done-1"].record is None
        assert rows["done-1"].table == DEFAULT_TABLE.name
        assert all(r.record is not None for k, r in rows.items() if k != "done-1")
        assert ROW_WAIT <= took < ROW_WAIT + 2
        again = {r.info.run_id: r for r in source.runs_page().rows}
        assert again["done-1"].record is not None
        assert not again["done-1"].reading
        # done-1 loaded by the held read, or not at all (the fold yielded it)
        assert gate.loads == ([] if fold else ["done-1"]) + ["done-2", "pay-1"]
        source.close()

    def test_the_inbox_waits_for_a_record_read_elsewhere(self, runs_db: Path) -> None:
        """The inbox must not leave a waiting run's calls out: it waits for the read."""
        gate = _Gate(runs_db, "pay-1")
        source = Source(gate.opener())
        held = gate.hold(source)
        pages: list[InboxPage] = []
        inbox = threading.Thread(target=lambda: pages.append(source.pending()))
        inbox.start()
        inbox.join(ROW_WAIT + 0.3)
        assert inbox.is_alive(), "the inbox waits for the record"
        gate.open.set()
        for t in (held, inbox):
            t.join(10)
        assert [c.record.run_id for c in pages[0].calls] == ["pay-1"]
        assert gate.loads == ["pay-1"]
        source.close()

    def test_a_page_that_needs_a_record_does_not_wait_for_a_fold(self, runs_db: Path) -> None:
        """The record of a run whose path is being folded is loaded for a page that needs
        it (the inbox), not waited for: a load takes a fraction of a long fold."""
        gate = _Gate(runs_db, "pay-1", fold=True)
        source = Source(gate.opener())
        held = gate.hold(source)
        pages: list[InboxPage] = []
        inbox = threading.Thread(target=lambda: pages.append(source.pending()))
        inbox.start()
        inbox.join(5)
        gate.open.set()
        held.join(10)
        assert pages, "the inbox waited for the fold"
        assert [c.record.run_id for c in pages[0].calls] == ["pay-1"]
        source.close()

    def test_a_fold_naps_while_other_reads_hold_handles(self, tmp_path: Path) -> None:
        """While another read holds a store handle, a fold of 2,000 events naps up to
        `_PAUSE_AT_MOST` every `_PAUSE_EVERY` events (its SQLite rows alone would never let
        the other thread have the GIL back), and alone it does not wait."""
        path = tmp_path / "runs.db"
        _store_run(path, "long", long_run("long", 2000))
        source = Source(opener(path))
        source.table_of("long")
        holding, release = threading.Event(), threading.Event()

        def hold(store: EventStore) -> None:
            holding.set()
            release.wait(30)

        other = threading.Thread(target=source.use, args=("long", hold))
        other.start()
        assert holding.wait(10)
        took = time.perf_counter()
        source.path("long")
        took = time.perf_counter() - took
        release.set()
        other.join(10)
        alone = time.perf_counter()
        Source(opener(path)).path("long")
        alone = time.perf_counter() - alone
        assert took >= (2000 // _PAUSE_EVERY - 1) * _PAUSE_AT_MOST
        assert alone < took / 2
        source.close()

    def test_a_first_view_reads_the_log_once(self, runs_db: Path) -> None:
        """A run page folds the run's path, which yields its record: no load beside it."""
        gate = _Gate(runs_db, "")
        source = Source(gate.opener())
        data = run_page(source, "pay-1", None, None)
        assert data["record"].run_id == "pay-1"
        assert gate.loads == []
        source.close()

    def test_the_server_hands_the_gil_on_within_a_millisecond(self, runs_db: Path) -> None:
        """Serving shortens the GIL's switch interval, so a light page's reads do not each
        wait 5 ms for a fold beside them to let go, and reads the installed tables first."""
        before = sys.getswitchinterval()
        sys.setswitchinterval(0.005)
        try:
            server = LiveServer(runs_db)
            try:
                assert sys.getswitchinterval() == SWITCH_INTERVAL <= 0.001
                assert _read_published.cache_info().currsize == 1
            finally:
                server.stop()
        finally:
            sys.setswitchinterval(before)

    def test_a_read_within_its_own_read_goes_on(self) -> None:
        """A thread reading a key may read it again inside (no waiting for itself)."""
        reads: Reads[str] = Reads()
        with reads.alone("run") as outer, reads.alone("run", wait=0) as inner:
            assert outer
            assert inner

    def test_a_bounded_wait_ends_without_the_key(self) -> None:
        """`wait` seconds after another thread began reading a key, a reader goes without."""
        reads: Reads[str] = Reads()
        inside, leave = threading.Event(), threading.Event()

        def hold() -> None:
            with reads.alone("run"):
                inside.set()
                leave.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert inside.wait(10)
        took = time.perf_counter()
        with reads.alone("run", wait=0.05) as mine:
            took = time.perf_counter() - took
            assert not mine
        with reads.alone("other", wait=0) as other:
            assert other
        leave.set()
        holder.join(10)
        with reads.alone("run", wait=0) as mine:
            assert mine
        assert 0.05 <= took < 1

    def test_handles_are_opened_only_as_reads_need_them(self, runs_db: Path) -> None:
        """One read at a time opens one handle per table; `readers` bounds how many open."""
        opened: list[EventStore] = []

        def counting(table: TransitionTable) -> EventStore:
            opened.append(opener(runs_db)(table))
            return opened[-1]

        source = Source(counting, readers=2)
        for _ in range(5):
            source.runs_page()
        assert len(opened) == 1
        release = threading.Event()
        holding = threading.Barrier(3)

        def hold(store: EventStore) -> None:
            holding.wait()
            release.wait(10)

        threads = [threading.Thread(target=source.use, args=("done-1", hold)) for _ in range(2)]
        for t in threads:
            t.start()
        holding.wait(10)
        assert len(opened) == 2
        third = threading.Thread(target=source.info, args=("done-1",))
        third.start()
        third.join(0.3)
        assert third.is_alive(), "a third read waits for one of the two handles"
        release.set()
        for t in [*threads, third]:
            t.join(10)
        assert len(opened) == 2
        source.close()

    def test_readers_must_be_at_least_one(self, runs_db: Path) -> None:
        """A pool of no handles could serve nothing: refused when the source is made."""
        with pytest.raises(ValueError, match=r"^readers must be at least 1, got 0$"):
            Source(opener(runs_db), readers=0)


@pytest.fixture(scope="module")
def many_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Twelve runs of 2,000 events each (about 0.5 MiB of record and 1 MiB of path apiece)."""
    path = tmp_path_factory.mktemp("many") / "runs.db"
    for i in range(12):
        _store_run(path, f"long-{i:02d}", long_run(f"long-{i:02d}", 2000))
    return path


def _bare(path: Path) -> Callable[[TransitionTable], EventStore]:
    """Handles that keep no records of their own, as `agentfsm ui` opens them."""
    return lambda table: SQLiteEventStore(
        path, options=StoreOptions(reducer=Reducer(table), cache_size=0)
    )


class TestCachesBoundedByBytes:
    """A source's caches hold at most `cache_bytes`, whatever the size of the runs viewed."""

    def test_the_estimates_are_not_below_what_is_held(self, many_db: Path) -> None:
        """A record's and a path's estimated bytes are at least what tracemalloc counts."""
        source = Source(_bare(many_db), cache_bytes=0)  # keeps nothing: measured alone
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            record = source.record("long-00")
            held_record = tracemalloc.get_traced_memory()[0] - before
            path = source.path("long-00")
            held_path = tracemalloc.get_traced_memory()[0] - before - held_record
        finally:
            tracemalloc.stop()
            source.close()
        assert held_record <= record_bytes(record)
        assert held_path <= _path_bytes(path)
        assert record_bytes(record) < 2 * held_record  # high, but not wildly

    def test_viewing_many_big_runs_holds_at_most_the_budget(self, many_db: Path) -> None:
        """After the record and path of twelve big runs were read (15 MiB if all kept), the
        source holds under its 4 MiB budget, counted by tracemalloc."""
        budget = 4 * 2**20
        source = Source(_bare(many_db), cache_bytes=budget)
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(12):
                source.record(f"long-{i:02d}")
                source.path(f"long-{i:02d}")
            gc.collect()
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        use = source.cache_use()
        source.close()
        assert use.record_bytes + use.path_bytes <= budget
        assert 0 < use.records < 12
        assert held <= budget * 1.25, held

    def test_a_run_bigger_than_the_budget_is_not_kept(self, many_db: Path) -> None:
        """A record weighing more than its half of the budget is served, not cached (it
        would empty the cache of every other run's records)."""
        source = Source(_bare(many_db), cache_bytes=2**16)
        assert source.record("long-00").run_id == "long-00"
        assert source.cache_use().records == 0
        source.close()

    def test_the_run_to_table_map_is_bounded(self, many_db: Path) -> None:
        """The source remembers the table of at most four runs per record it may keep."""
        source = Source(_bare(many_db), cache_size=2)
        for i in range(12):
            source.table_of(f"long-{i:02d}")
        assert source.cache_use().run_tables == 8
        source.close()


class TestSizedCache:
    """The LRU map under the source's caches, bounded by count and by bytes."""

    @given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 50)), max_size=200))
    def test_never_over_either_bound(self, puts: list[tuple[int, int]]) -> None:
        """Whatever is put, the count and the bytes stay within bounds, the bytes are the
        sum of what is kept, and the value put last is kept unless it alone is too big."""
        cache: SizedCache[int, int] = SizedCache(5, 100, lambda w: w)
        for key, weight in puts:
            cache.put(key, weight)
            kept = [cache.get(k) for k in range(21)]
            assert len(cache) <= 5
            assert cache.bytes == sum(w for w in kept if w is not None) <= 100
            assert cache.get(key) == weight


class TestInstalledTablesReadOnce:
    """The tables installed packages publish are read once per process, not per page."""

    def test_pages_do_not_rescan_installed_packages(
        self, runs_db: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Five runs lists and an inbox scan the installed distributions' entry points once
        (each scan cost ~70 ms, and every page asked, some twice)."""
        from agentfsm.fsm import registry

        scans: list[str] = []
        real = registry.entry_points

        def counted(**kw: str) -> Any:
            scans.append(kw["group"])
            return real(**kw)

        monkeypatch.setattr(registry, "entry_points", counted)
        registry._read_published.cache_clear()
        source = Source(opener(runs_db))
        for _ in range(5):
            source.runs_page()
        source.pending()
        source.close()
        assert scans == [registry.ENTRY_POINT_GROUP]

    def test_a_tables_state_names_are_built_once(self) -> None:
        """Every runs list and each of its rows asks a table its state names: one tuple."""
        assert DEFAULT_TABLE.state_names is DEFAULT_TABLE.state_names
        assert DEFAULT_TABLE.state_names == tuple(s.name for s in DEFAULT_TABLE.states)


class TestALongRunsPathGrows:
    def test_the_path_folded_on_is_the_path_folded_whole(self, tmp_path: Path) -> None:
        """A run that grew past a checkpoint is folded only where it grew, and its path,
        checkpoints and record are those a fresh fold makes (the record is then the run's
        record, without a load)."""
        from agentfsm.testing import scripted_run

        path = tmp_path / "runs.db"
        make_runs(path)
        events = scripted_run("long", 60)  # 301 events
        source = Source(opener(path))
        with SQLiteEventStore(path) as store:
            store.append("long", events[:250], 0)
            before = source.path("long")
            store.append("long", events[250:], 250)
        grown = source.path("long")
        fresh = Source(opener(path)).path("long")
        with SQLiteEventStore(path) as store:  # the record a page shows: the path's, the load's
            assert source.record("long").dumps() == store.load("long").dumps()
        assert (before.version, grown.version) == (250, 301)
        assert grown.trajectory == fresh.trajectory
        assert grown.checkpoints.keys() == fresh.checkpoints.keys() == {256}
        assert grown.record is not None
        assert fresh.record is not None
        assert grown.record.dumps() == fresh.record.dumps()
        assert (
            source.record_at("long", 280).dumps()
            == Source(opener(path)).record_at("long", 280).dumps()
        )


class TestARecordFoldsOn:
    """A record cached at an earlier version is folded on by the events since, not loaded
    again: a list polling a growing long run reads its new events only."""

    def test_the_record_folded_on_is_the_stores(self, tmp_path: Path) -> None:
        """Read at 250 events, then at 301: one load, and the record is the store's."""
        from agentfsm.testing import scripted_run

        path = tmp_path / "runs.db"
        make_runs(path)
        events = scripted_run("long", 60)  # 301 events
        gate = _Gate(path, "")
        source = Source(gate.opener())
        with SQLiteEventStore(path) as store:
            store.append("long", events[:250], 0)
            assert source.record("long").version == 250
            store.append("long", events[250:], 250)
            grown = source.record("long")
            assert grown.dumps() == store.load("long").dumps()
        assert grown.version == 301
        assert gate.loads == ["long"]
        source.close()

    def test_a_record_far_behind_is_loaded(self, tmp_path: Path) -> None:
        """Past `_FOLD_ON_AT_MOST` new events the store's load (snapshot and tail) is read."""
        path = tmp_path / "runs.db"
        events = long_run("long", _FOLD_ON_AT_MOST + 300)
        gate = _Gate(path, "")
        source = Source(gate.opener())
        _store_run(path, "long", events[:100])
        assert source.record("long").version == 100
        _store_run(path, "long", events, after=100)
        with SQLiteEventStore(path) as store:
            assert source.record("long").dumps() == store.load("long").dumps()
        assert gate.loads == ["long", "long"]
        source.close()
