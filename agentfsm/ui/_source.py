"""Where the UI reads runs from: a store (handles per table), or a log file.

Every page reads through a `Source`, which lends each read a store handle of its own, from
a pool per table its runs are under (a run is folded with the table it was started under):
a store handle is meant for one thread at a time, the server answers on a pool of threads,
and reads on handles of their own run side by side, so a heavy page never holds up a light
one (`_pool.py`). Records are cached by `(run_id, version)`: a run's record at a version
never changes, so a page polled every few seconds costs the index query and nothing more
while runs stand still. Every cache is bounded by its count and by an estimate of its bytes.

A log file is read through a `LogSource` (`_log_source.py`), a `Source` over a memory store.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TypeVar

import attrs

from agentfsm.diagrams._trajectory import Refusal, Step, Trajectory, fold_trajectory
from agentfsm.errors import (
    AgentFSMError,
    RunNotFoundError,
    TableMismatchError,
    UnknownRunTableError,
    UnknownTableError,
)
from agentfsm.events.models import Event, TableRef
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.registry import known_tables, lookup
from agentfsm.fsm.table import TransitionTable
from agentfsm.names import StateKind
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores._load import close_iterator as _close
from agentfsm.stores._load import run_tables
from agentfsm.stores.base import EventStore
from agentfsm.stores.runs import COUNT_EXACT_UP_TO, RunCount, RunInfo, RunOrder
from agentfsm.ui._pool import HandlePool, Reads, SizedCache, record_bytes

__all__ = [
    "CACHE_BYTES",
    "CALLS_PER_PAGE",
    "EVENTS_PER_PAGE",
    "INBOX_RUNS",
    "READERS",
    "ROW_WAIT",
    "CacheUse",
    "InboxPage",
    "PendingCall",
    "RunPath",
    "RunRow",
    "RunsPage",
    "Source",
    "StoreOpener",
]

#: Opens a handle on the store whose runs are folded with the given table.
StoreOpener = Callable[[TransitionTable], EventStore]

#: Events per page of a run's timeline: a 10,000-event run is 100 pages, never one.
EVENTS_PER_PAGE = 100
#: A record kept every this many events while a run's path is computed, so the record at any
#: event is at most this many folds away.
_CHECKPOINT_EVERY = 256
#: How many index rows one runs page may read to fill itself when filtering by table.
_SCAN_PAGES = 20
#: Waiting calls per page of the approvals inbox: a run waiting on 1,000 calls is 20 pages.
CALLS_PER_PAGE = 50
#: How many waiting runs the approvals inbox reads at most to fill one page.
INBOX_RUNS = 200
#: Seconds a runs list's row waits for a record another page is reading before it is drawn
#: from the index alone: longer than a short run's load takes (~1 ms), far shorter than a
#: long run's (a 20,000-event log folds in ~0.5 s).
ROW_WAIT = 0.1
#: Events a record cached at an earlier version is folded on by at most; past that, the
#: store's load (its snapshot and at most ~1,000 events) is read instead.
_FOLD_ON_AT_MOST = 1000
#: A fold hands the GIL on every this many events (~3 ms of folding), napping `_NAP`
#: seconds, and while other reads hold store handles, up to `_PAUSE_AT_MOST` (`_yield`).
#: Measured beside a thread ticking every 1 ms: its worst wait 81 ms -> 11 ms, for a fold
#: alone 14% slower (every 32 events: 8 ms, 32% slower).
_PAUSE_EVERY = 64
_NAP = 0.0001
_PAUSE_AT_MOST = 0.01
#: Store handles per table a `Source` opens at most: reads beyond wait for one to be free.
READERS = 8
#: Bytes the record and path caches of a `Source` hold at most, half each (an estimate on
#: the high side: a 100,000-event run's path is ~40 MiB of it).
CACHE_BYTES = 128 * 2**20
#: Paths kept at most: each is a whole run's worth of steps.
_PATHS_KEPT = 16
#: Runs whose table is remembered, per record the cache keeps (a few hundred bytes each).
_TABLES_PER_RECORD = 4
#: What a path costs per step (a `Step` and its share of the trajectory), measured with
#: tracemalloc at about 0.4 KiB (issue 32); its checkpoints share most of their records.
_PATH_PER_STEP = 512

_T = TypeVar("_T")


@attrs.frozen
class RunRow:
    """One line of the runs list: the index row, and the record when it could be read."""

    info: RunInfo
    record: RunRecord | None
    table: str | None
    problem: str | None = None
    #: The record is being read by another page: the row is the index row alone for now.
    reading: bool = False


@attrs.frozen
class RunsPage:
    """A page of the runs list, and the cursor of the next one (None on the last page).

    Attributes:
        rows: the runs on the page.
        next_after: where the next page starts (after this run), or None.
        scanned: how many index rows were read to fill it.
        order: the order it is in (run id when the store lists in no other).
    """

    rows: tuple[RunRow, ...]
    next_after: str | None
    scanned: int
    order: RunOrder = "run_id"


@attrs.frozen
class PendingCall:
    """A call waiting for a person's decision, with the run it waits in."""

    record: RunRecord
    action_id: str
    table: str


@attrs.frozen
class InboxPage:
    """A page of the approvals inbox, and where the next one starts.

    Attributes:
        calls: the waiting calls, by run id, then in the order each run requested them.
        next_run: the next page starts in or after this run (None on the last page).
        next_call: ... after this call of `next_run` (None: after the whole run).
    """

    calls: tuple[PendingCall, ...]
    next_run: str | None = None
    next_call: str | None = None


@attrs.frozen
class CacheUse:
    """What a `Source` holds in its caches now (bytes as estimated, on the high side)."""

    records: int
    record_bytes: int
    paths: int
    path_bytes: int
    run_tables: int


@attrs.frozen
class RunPath:
    """A run's path through its table, computed once per version: one fold of the log,
    then of what it grew by (a live run's page folds each new event once, not its whole log
    again).

    Attributes:
        version: the last event folded.
        trajectory: each event's move.
        checkpoints: the record every 256 events.
        record: the record after the last event folded (None: not kept).
        table: the digest of the table it was folded with.
    """

    version: int
    trajectory: Trajectory
    checkpoints: dict[int, RunRecord]
    record: RunRecord | None = None
    table: str = ""


class Source:
    """The runs a UI shows, read through store handles opened by `opener`.

    Args:
        opener: opens a handle folding runs with a given table.
        tables: tables to know beside the registered ones (`--table`).
        refusals: per run, where its log broke the lifecycle (log files only).
        label: what the pages call the source (a path; a URL without its password).
        cache_size: how many records to keep, by `(run_id, version)` (and the tables of
            four times as many runs). Open handles with `StoreOptions(cache_size=0)`: a
            handle's own cache of records is bounded by count only.
        readers: how many store handles to open per table at most, so that many reads run
            at once (on PostgreSQL, a connection each).
        cache_bytes: how many bytes the cached records and paths may hold (half each).
    """

    def __init__(
        self,
        opener: StoreOpener,
        *,
        tables: Sequence[TransitionTable] = (),
        refusals: dict[str, tuple[Refusal, tuple[str, ...]]] | None = None,
        label: str = "",
        cache_size: int = 4096,
        readers: int = READERS,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        self._opener = opener
        self._extra = tuple(tables)
        self._default = self._extra[0] if self._extra else DEFAULT_TABLE
        self.refusals = refusals or {}
        self.label = label
        self._pool = HandlePool(readers)
        kept = cache_size * _TABLES_PER_RECORD
        self._run_tables: SizedCache[str, TransitionTable] = SizedCache(kept, kept, lambda _: 1)
        self._records: SizedCache[str, tuple[int, RunRecord]] = SizedCache(
            cache_size, cache_bytes // 2, lambda kept: record_bytes(kept[1])
        )
        self._paths: SizedCache[str, RunPath] = SizedCache(
            _PATHS_KEPT, cache_bytes // 2, _path_bytes
        )
        # One load of a run's record and one fold of its path at a time: two pages that want
        # either at once read it once (`Reads`). A list's row also waits a little for a fold,
        # which yields the record; a page that needs the record loads it rather than wait
        # for a whole fold.
        self._reads: Reads[tuple[str, str]] = Reads()
        # Folds under way: each holds one store handle, which `_yield` does not wait for.
        self._folds = 0
        self._folding_lock = threading.Lock()

    # -- tables ------------------------------------------------------------------------

    def tables(self) -> list[TransitionTable]:
        """Every table the source knows: those given, then the registered ones."""
        found = {t.digest: t for t in self._extra}
        for table in known_tables():
            found.setdefault(table.digest, table)
        return list(found.values())

    def table(self, digest: str) -> TransitionTable | None:
        """The known table with `digest`, or None."""
        return next((t for t in self.tables() if t.digest == digest), None)

    def _lookup(self, ref: TableRef) -> TransitionTable:
        for table in self._extra:
            if table.digest == ref.digest:
                return table
        try:
            return lookup(ref)
        except UnknownTableError as exc:
            raise UnknownRunTableError(
                f"{exc}; or start `agentfsm ui` with --table MODULE:ATTR"
            ) from None

    # -- store handles -----------------------------------------------------------------

    @contextmanager
    def _store(self, table: TransitionTable) -> Iterator[EventStore]:
        with self._pool.handle(table.digest, lambda: self._opener(table)) as store:
            yield store

    def cache_use(self) -> CacheUse:
        """What the caches hold now: each is bounded by its count and by `cache_bytes`."""
        r, p = self._records, self._paths
        return CacheUse(len(r), r.bytes, len(p), p.bytes, len(self._run_tables))

    def handles(self, table: TransitionTable) -> int:
        """How many store handles are open on `table` (at most `readers`)."""
        return self._pool.opened(table.digest)

    def close(self) -> None:
        """Close every handle the source opened (one in use is closed when it is done)."""
        self._pool.close()

    def use(self, run_id: str, act: Callable[[EventStore], _T]) -> _T:
        """Run `act` on a store handle of `run_id`'s table, lent to this thread alone."""
        try:
            with self._store(self.table_of(run_id)) as store:
                return act(store)
        except TableMismatchError:
            # The run was migrated to another table: read where its log moved it to.
            moved = self._lookup_or_default(self._migrated_to(run_id))
            self._run_tables.put(run_id, moved)
            with self._store(moved) as store:
                return act(store)

    def table_of(self, run_id: str) -> TransitionTable:
        """The table `run_id` was started under (its first event says), or, once a load
        found it migrated, the one it moved to.

        Raises:
            RunNotFoundError: no such run.
            UnknownRunTableError: its table is not known here.
        """
        cached = self._run_tables.get(run_id)
        if cached is None:
            cached = self._lookup_or_default(self._started(run_id))
            self._run_tables.put(run_id, cached)
        return cached

    def _lookup_or_default(self, ref: TableRef | None) -> TransitionTable:
        return self._default if ref is None else self._lookup(ref)

    def _started(self, run_id: str) -> TableRef | None:
        with self._store(self._default) as store:
            return run_tables(store.events(run_id), first_only=True)[0]

    def _migrated_to(self, run_id: str) -> TableRef | None:
        """The table the latest `run.migrated` of the log names (each stretch read with its
        own table's types where the reader knows it)."""
        with self._store(self._default) as store:
            return run_tables(store.events(run_id))[1]

    # -- reading -----------------------------------------------------------------------

    def info(self, run_id: str) -> RunInfo:
        """The run's index row (RunNotFoundError if absent)."""
        with self._store(self._default) as store:
            return store.run_info(run_id)

    def record(self, run_id: str) -> RunRecord:
        """The run's current record (cached by version)."""
        info = self.info(run_id)
        return self._record_for(info)

    def _record_for(self, info: RunInfo) -> RunRecord:
        record = self._read_record(info, None)
        assert record is not None  # waiting with no bound always ends with the record
        return record

    def _cached_record(self, info: RunInfo) -> RunRecord | None:
        cached = self._records.get(info.run_id)
        if cached is not None and cached[0] == info.version:
            return cached[1]
        path = self._paths.get(info.run_id)
        if path is not None and path.version == info.version and path.record is not None:
            # The path was folded on to this version (a live page): its record is the load's.
            self._records.put(info.run_id, (path.version, path.record))
            return path.record
        return None

    def _read_record(self, info: RunInfo, wait: float | None) -> RunRecord | None:
        """The record at `info`'s version: cached, or loaded once however many ask at once.
        With a bounded `wait` (a list's row), a fold of the run's path under way (which
        yields the record) is waited for too; None if the run was still being read after
        `wait` seconds."""
        found = self._cached_record(info)
        if found is not None:
            return found
        run_id = info.run_id
        left = wait
        if wait is not None:
            deadline = time.monotonic() + wait
            if not self._reads.wait_for(("path", run_id), wait):
                return None
            found = self._cached_record(info)  # the path folded while this thread waited
            if found is not None:
                return found
            left = max(deadline - time.monotonic(), 0.0)
        with self._reads.alone(("record", run_id), left) as mine:
            if not mine:
                return None
            found = self._cached_record(info)  # loaded while this thread waited
            if found is not None:
                return found
            record = self._folded_on(info)
            if record is None:
                record = self.use(run_id, lambda s: s.load(run_id))
            self._records.put(run_id, (record.version, record))
            return record

    def _folded_on(self, info: RunInfo) -> RunRecord | None:
        """The record cached at an earlier version folded on by the events since, when
        fewer than `_FOLD_ON_AT_MOST`: a list polling a growing long run folds its new
        events, not the store's snapshot and tail again (~1 s at 60,000 events). None when
        there is none to fold on from, or the fold fails (the store's load then says why, or
        reads a migrated run under its new table)."""
        cached = self._records.get(info.run_id)
        if cached is None or not 0 < info.version - cached[0] <= _FOLD_ON_AT_MOST:
            return None
        run_id, record = info.run_id, cached[1]
        try:
            # Not through `use`: a migration is the store's load's to read, not this fold's.
            with self._store(self.table_of(run_id)) as store:
                events = store.events(run_id, after=record.version)
                try:
                    for event in events:
                        record = store.reducer.reduce(record, event)
                finally:
                    _close(events)
                store.reducer.check_run_table(record)
        except AgentFSMError:
            return None
        return record

    def _row(self, info: RunInfo, wait: float | None = None) -> RunRow:
        try:
            record = self._read_record(info, wait)
            if record is None:
                # Another page is reading this run's record (the first view of a long run
                # takes seconds): the row says what the index says, and the next refresh
                # the rest.
                return RunRow(info, None, self.table_of(info.run_id).name, reading=True)
        except (UnknownRunTableError, AgentFSMError) as exc:
            return RunRow(info, None, None, str(exc))
        return RunRow(info, record, record.table.name if record.table else self._default.name)

    def runs_page(
        self,
        *,
        status: Sequence[str] = (),
        table: str | None = None,
        search: str | None = None,
        after: str | None = None,
        limit: int = 50,
        order: RunOrder = "run_id",
        record_wait: float | None = ROW_WAIT,
    ) -> RunsPage:
        """A page of runs in `order`, read from the store's index, after run `after`.

        `search` keeps run ids that start with it; `table` keeps runs under a table of that
        name (known only once a run's record is read). In run-id order a search is a range
        of the index; otherwise, as with `table`, a page reads up to 20 pages of the index
        to fill itself, and says where to go on. A store that lists by run id only is read
        in that order (the page's `order` says which it was).

        A row whose record another page is reading waits for it `record_wait` seconds at
        most (None: as long as it takes), then is drawn from the index alone (`reading`).
        """
        if order == "run_id":
            return self._runs_by_id(status, table, search, after, limit, record_wait)
        cursor = after
        rows: list[RunRow] = []
        scanned = 0
        for _ in range(_SCAN_PAGES if table or search else 1):
            try:
                with self._store(self._default) as store:
                    infos = store.runs(status or None, limit=limit, after=cursor, order=order)
            except NotImplementedError:
                return self._runs_by_id(status, table, search, after, limit, record_wait)
            for info in infos:
                scanned += 1
                cursor = info.run_id
                if search and not info.run_id.startswith(search):
                    continue
                row = self._row(info, record_wait)
                if table is None or row.table == table:
                    rows.append(row)
                if len(rows) >= limit:
                    return RunsPage(tuple(rows), cursor, scanned, order)
            if len(infos) < limit:
                return RunsPage(tuple(rows), None, scanned, order)
        return RunsPage(tuple(rows), cursor, scanned, order)

    def _runs_by_id(
        self,
        status: Sequence[str],
        table: str | None,
        search: str | None,
        after: str | None,
        limit: int,
        record_wait: float | None,
    ) -> RunsPage:
        # Each index read borrows a handle only for itself: a record read for a row takes
        # one of its own, and holding one while waiting for another could take every
        # handle of the pool and leave all readers waiting.
        cursor = after
        rows: list[RunRow] = []
        scanned = 0
        if search and after is None:
            try:
                exact = self.info(search)
            except RunNotFoundError:
                exact = None
            if exact is not None and (not status or exact.status in status):
                rows.append(self._row(exact, record_wait))
            cursor = search
        for _ in range(_SCAN_PAGES if table else 1):
            with self._store(self._default) as store:
                infos = store.runs(status or None, limit=limit, after=cursor)
            for info in infos:
                if search and not info.run_id.startswith(search):
                    return RunsPage(tuple(rows), None, scanned)
                scanned += 1
                cursor = info.run_id
                row = self._row(info, record_wait)
                if table is None or row.table == table:
                    rows.append(row)
                if len(rows) >= limit:
                    return RunsPage(tuple(rows), cursor, scanned)
            if len(infos) < limit:
                return RunsPage(tuple(rows), None, scanned)
        return RunsPage(tuple(rows), cursor, scanned)

    def count(self, status: Sequence[str] = (), up_to: int = COUNT_EXACT_UP_TO) -> RunCount:
        """How many runs are in `status` (any status when empty), from the store's index:
        exact up to `up_to`, estimated past it (`EventStore.count_runs`)."""
        with self._store(self._default) as store:
            return store.count_runs(status or None, exact_up_to=up_to)

    def children(self, run_id: str) -> list[RunInfo]:
        """The subagent runs `run_id` started (ids `run_id/action_id`), from the index."""
        prefix = f"{run_id}/"
        with self._store(self._default) as store:
            # One index row first: most runs start none, and reading 1,000 rows of other
            # runs to learn it cost more than the rest of a cached run page (issue 32).
            first = store.runs(after=prefix, limit=1)
            if not first or not first[0].run_id.startswith(prefix):
                return []
            found = store.runs(after=prefix, limit=1000)
        return [
            i for i in found if i.run_id.startswith(prefix) and "/" not in i.run_id[len(prefix) :]
        ]

    def parent(self, run_id: str) -> str | None:
        """The run that started `run_id` as a subagent, when it is stored."""
        parent, sep, _ = run_id.rpartition("/")
        if not sep or not parent:
            return None
        try:
            self.info(parent)
        except RunNotFoundError:
            return None
        return parent

    def events_page(self, run_id: str, page: int) -> list[Event]:
        """Events `(page-1)*100+1 ...` of the run (one page, read lazily from the store)."""
        after = (page - 1) * EVENTS_PER_PAGE

        def read(store: EventStore) -> list[Event]:
            events = store.events(run_id, after=after)
            try:
                return list(itertools.islice(events, EVENTS_PER_PAGE))
            finally:
                _close(events)

        return self.use(run_id, read)

    def event(self, run_id: str, sequence: int) -> Event | None:
        """The run's event at `sequence`, or None past its end (one event read)."""
        return self.use(run_id, lambda store: _first(store.events(run_id, after=sequence - 1)))

    def path(self, run_id: str) -> RunPath:
        """The run's path (each event's move), computed once per version."""
        info = self.info(run_id)
        cached = self._paths.get(run_id)
        if cached is not None and cached.version == info.version:
            return cached
        with self._reads.alone(("path", run_id)) as mine:
            assert mine  # waiting with no bound always ends alone
            cached = self._paths.get(run_id)  # folded while this thread waited
            if cached is not None and cached.version >= info.version:
                return cached
            table = self.table_of(run_id)
            grown = cached if cached is not None and _goes_on(cached, table) else None

            def fold(store: EventStore) -> RunPath:
                after = grown.version if grown is not None else 0
                events = store.events(run_id, after=after)
                return _fold_path(store.reducer, table, run_id, events, grown, self._yield)

            with self._folding_lock:
                self._folds += 1
            try:
                path = self.use(run_id, fold)
            finally:
                with self._folding_lock:
                    self._folds -= 1
            self._paths.put(run_id, path)
            return path

    def record_at(self, run_id: str, sequence: int) -> RunRecord:
        """The run's record right after the event at `sequence` (at most 255 folds from a
        checkpoint of its path)."""
        path = self.path(run_id)
        base = max((s for s in path.checkpoints if s <= sequence), default=0)
        start = path.checkpoints.get(base)

        def fold(store: EventStore) -> RunRecord:
            record = start if start is not None else store.reducer.initial(run_id)
            events = store.events(run_id, after=base)
            try:
                for event in itertools.islice(events, sequence - base):
                    record = store.reducer.reduce(record, event)
            finally:
                _close(events)
            return record

        return self.use(run_id, fold)

    def pending(
        self, after: str | None = None, after_call: str | None = None,
        limit: int = CALLS_PER_PAGE,
    ) -> InboxPage:  # fmt: skip
        """A page of the calls waiting for a decision, keyed by (run, call): the calls of the
        runs after `after`, or, with `after_call`, those of `after` requested after that call
        and then the later runs'. At most `limit` calls, from at most `INBOX_RUNS` waiting runs.

        A key, not an offset: a call decided between two pages shifts no other call off them.
        """
        statuses = sorted(
            {s for t in self.tables() for s in t.states_of(StateKind.WAITING, StateKind.IN_FLIGHT)}
        )
        calls: list[PendingCall] = []

        def full(row: RunRow, waiting: Sequence[str]) -> bool:
            """Add `waiting` of `row` to the page; True once a call is left over."""
            assert row.record is not None
            for action_id in waiting:
                if len(calls) == limit:
                    return True
                calls.append(PendingCall(row.record, action_id, row.table or ""))
            return False

        def next_after_last() -> InboxPage:
            last = calls[-1]
            return InboxPage(tuple(calls), last.record.run_id, last.action_id)

        if after is not None and after_call is not None:
            first = self._waiting_row(after, statuses)
            rest = _requested_after(first.record, after_call) if first and first.record else ()
            if first is not None and full(first, rest):
                return next_after_last()
        with self._store(self._default) as store:
            infos = store.runs(statuses, limit=INBOX_RUNS, after=after)
        for info in infos:
            row = self._row(info)
            if row.record is not None and full(row, row.record.pending_approvals):
                return next_after_last()
        if len(infos) == INBOX_RUNS:  # runs not read yet: the next page reads on from there
            return InboxPage(tuple(calls), infos[-1].run_id, None)
        return InboxPage(tuple(calls))

    def _waiting_row(self, run_id: str, statuses: Sequence[str]) -> RunRow | None:
        try:
            info = self.info(run_id)
        except RunNotFoundError:
            return None
        return self._row(info) if info.status in statuses else None

    def _yield(self) -> None:
        """Called by a fold every `_PAUSE_EVERY` events: give the GIL to the other threads.

        A fold's every SQLite row gives the GIL up and takes it back before a thread woken
        for it can, and CPython then never forces a switch (the GIL did change hands), so on
        a machine with a core free everything else waited for the whole fold (a runs list
        0.9 s beside a 1.4 s view; the server's event loop too). A nap hands it on for real;
        while other reads hold store handles, the fold naps until they are done (at most
        `_PAUSE_AT_MOST` each time, so it goes on under any load)."""
        time.sleep(_NAP)
        paused = _NAP
        while self._pool.lent() > self._folds and paused < _PAUSE_AT_MOST:
            time.sleep(_NAP)
            paused += _NAP

    def forget(self, run_id: str) -> None:
        """Drop what is cached about `run_id` (after this server appended to it)."""
        self._records.pop(run_id)
        self._paths.pop(run_id)


def _path_bytes(path: RunPath) -> int:
    """An estimate, on the high side, of the bytes `path` holds."""
    kept = [*path.checkpoints.values(), *([path.record] if path.record else [])]
    checkpoint = max((record_bytes(r) for r in kept), default=0)
    return _PATH_PER_STEP * len(path.trajectory.steps) + checkpoint


def _requested_after(record: RunRecord, action_id: str) -> Sequence[str]:
    """The calls of `record` waiting for a decision that were requested after `action_id`
    (which may have been decided since): the ledger's order is the order of requests."""
    waiting = record.pending_approvals
    if action_id in waiting:
        return waiting[waiting.index(action_id) + 1 :]
    if action_id not in record.actions:
        return waiting
    open_ = set(waiting)
    later: list[str] = []
    seen = False
    for aid in record.actions:  # one pass over the ledger, in the order calls joined it
        if seen and aid in open_:
            later.append(aid)
        seen = seen or aid == action_id
    return later


def _first(events: Iterator[Event]) -> Event | None:
    try:
        return next(events, None)
    finally:
        _close(events)


def _goes_on(path: RunPath, table: TransitionTable) -> bool:
    """Whether a longer log's path can be folded on from `path` (same table, no refusal)."""
    return path.record is not None and path.table == table.digest and not path.trajectory.refusal


def _fold_path(
    reducer: Reducer,
    table: TransitionTable,
    run_id: str,
    events: Iterator[Event],
    since: RunPath | None = None,
    pause: Callable[[], None] | None = None,
) -> RunPath:
    checkpoints: dict[int, RunRecord] = dict(since.checkpoints) if since is not None else {}
    before = (since.trajectory, since.record) if since is not None and since.record else None

    def keep(step: Step, before: RunRecord, after: RunRecord, event: Event) -> None:
        if step.sequence % _CHECKPOINT_EVERY == 0:
            checkpoints[step.sequence] = after
        if pause is not None and step.sequence % _PAUSE_EVERY == 0:
            pause()

    try:
        # A stored log the reducer refuses now (a bug) ends the path at the refusal.
        trajectory, record = fold_trajectory(
            run_id, events, table, reducer, on_step=keep, since=before
        )
    finally:
        _close(events)
    return RunPath(record.version, trajectory, checkpoints, record, table.digest)
