"""The web UI at scale: the runs list over 100,000 runs, a run page of a 10,000-event run,
the inbox and run page of a run waiting on a 1,000-call batch.

    .venv/bin/python benchmarks/bench_ui.py [--runs 100000] [--events 10000] [--batch 1000]
        [--rounds 5]

What is measured (medians over rounds, through Starlette's TestClient, so a figure is the
whole request: routing, store reads, folds, Graphviz, template):

- a runs-list page (50 runs) of a store holding `--runs` runs, first page and a page deep in
  the index (`after=`), next to the bare index query `store.runs(limit=50)`; cold (records not
  yet cached by the server) and warm (what a polling page costs while runs stand still);
- a run page of a `--events`-event run, next to `store.load` of that run: the first view
  (one fold of the log for its path, the diagram drawn by Graphviz) and a later page of its
  timeline (served from the cached path), and one step of the step-through (`at=`);
- the approvals inbox and the run page of a run whose one decision proposed `--batch` calls
  that each wait for approval (issue 25: this once drew every call with every other), cold,
  with the bytes of each answer;
- the runs list in its other orders (oldest first, by status; a page deep in the list), and
  its counts past the exact bound (issue 29: estimates);
- a live page's stream (issue 29): one look at a run that did not move (what each open
  stream costs a tick), and the look that sends a `--events`-event run's page the rows of
  a tool turn (5 events) just appended to it, next to `store.run_info`;
- a light page beside a heavy one (issue 32), over a live server (uvicorn on loopback): a
  version poll and the runs list asked 0.3 s into the first view of a `--beside`-event run
  stored without snapshots (its record a fold of the whole log too), next to that view.

The store is built once in a temporary directory on /dev/shm when there is one (building
100,000 runs with fsync per commit would measure the disk), with SQLite synchronous=NORMAL.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from starlette.testclient import TestClient

from agentfsm import LogBuilder, SQLiteEventStore
from agentfsm.events.models import Event
from agentfsm.fsm.table import TransitionTable
from agentfsm.reducers.reduce import Reducer
from agentfsm.stores.base import EventStore, StoreOptions
from agentfsm.ui import Source, UIConfig, create_app


def short_run(run_id: str, i: int) -> list[Event]:
    log = LogBuilder(run_id)
    log.add("run.started", objective=f"task {i}", agent="bench")
    log.add("model.started")
    log.add("model.completed", decision="final", output=f"answer {i}",
            usage={"input_tokens": 10, "output_tokens": 5, "cost": 0.001})  # fmt: skip
    if i % 3:
        log.add("run.completed")
    return log.events


def long_run(run_id: str, events: int) -> list[Event]:
    log = LogBuilder(run_id)
    log.add("run.started", objective="a long run", agent="bench")
    i = 0
    while len(log.events) < events - 5:
        i += 1
        log.add("model.started")
        calls = [{"action_id": f"a{i}", "tool": "lookup", "arguments": {"n": i}}]
        log.add("model.completed", decision="tool_calls", tool_calls=calls)
        log.add("tool.requested", action_id=f"a{i}", tool="lookup", arguments={"n": i})
        log.add("tool.started", action_id=f"a{i}")
        log.add("tool.completed", action_id=f"a{i}", result={"n": i})
    log.add("model.started")
    log.add("model.completed", decision="final", output="done")
    log.add("run.completed")
    return log.events


def batch_run(run_id: str, calls: int) -> list[Event]:
    """A run whose one decision proposed `calls` calls, each now waiting for approval."""
    log = LogBuilder(run_id)
    log.add("run.started", objective="refund every order", agent="bench")
    log.add("model.started")
    batch = [{"action_id": f"b{i}", "tool": "refund", "arguments": {"order": f"O-{i}"}}
             for i in range(calls)]  # fmt: skip
    log.add("model.completed", decision="tool_calls", tool_calls=batch)
    for c in batch:
        log.add("approval.requested", action_id=c["action_id"], tool=c["tool"],
                arguments=c["arguments"])  # fmt: skip
    return log.events


def build(path: Path, runs: int, events: int, batch: int) -> None:
    with SQLiteEventStore(path, synchronous="NORMAL") as store:
        # Made first, so the list's first page (newest first) holds what it held by run id:
        # the batch, the long run and 48 short runs.
        live = long_run("live-run", events)[:-3]  # the long run, not over: it goes on
        for start in range(0, len(live), 1000):
            store.append("live-run", live[start : start + 1000], start)
        for i in range(runs):
            run_id = f"run-{i:06d}"
            store.append(run_id, short_run(run_id, i), 0)
        for run_id, big in (("long-run", long_run("long-run", events)),
                            ("batch", batch_run("batch", batch))):  # fmt: skip
            for start in range(0, len(big), 1000):
                store.append(run_id, big[start : start + 1000], start)


def median_ms(fn: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--beside", type=int, default=20_000, help="0: leave it out")
    args = parser.parse_args(argv)
    shm = Path("/dev/shm")  # noqa: S108 - a private TemporaryDirectory is made inside it
    base = shm if shm.is_dir() else None
    with tempfile.TemporaryDirectory(dir=base) as tmp:
        path = Path(tmp) / "ui.db"
        started = time.perf_counter()
        build(path, args.runs, args.events, args.batch)
        took = time.perf_counter() - started
        print(f"store: {args.runs:,} runs + one run of {args.events:,} events + one run "
              f"waiting on {args.batch:,} calls, built in {took:.0f} s")  # fmt: skip

        def opener(table: TransitionTable) -> EventStore:
            return SQLiteEventStore(path, options=StoreOptions(reducer=Reducer(table)))

        def fresh() -> TestClient:
            """A server that has read no run yet (its templates compiled, its caches empty)."""
            config = UIConfig(token="x" * 20, allowed_hosts=("testserver",))
            app = create_app(Source(opener), config)
            client = TestClient(app)
            client.get("/?q=none")
            client.get("/run?id=none")
            return client

        sizes: dict[str, int] = {}

        def cold(url: str) -> float:
            times = []
            for _ in range(rounds):
                client = fresh()
                start = time.perf_counter()
                sizes[url] = len(client.get(url).content)
                times.append(time.perf_counter() - start)
            return statistics.median(times) * 1000

        rounds = args.rounds
        store = SQLiteEventStore(path)
        deep = f"run-{args.runs // 2:06d}"
        query = median_ms(lambda: store.runs(limit=50), rounds * 4)
        query_deep = median_ms(lambda: store.runs(limit=50, after=deep), rounds * 4)
        load = median_ms(lambda: store.load("long-run"), rounds)
        cold_first = cold("/")
        client = fresh()
        client.get("/")
        warm = median_ms(lambda: client.get("/"), rounds * 4)
        cold_deep = cold(f"/?after={deep}")
        first_view = cold("/run?id=long-run")
        client.get("/run?id=long-run")
        later_page = median_ms(lambda: client.get("/run?id=long-run&page=37"), rounds)
        step = median_ms(lambda: client.get("/run?id=long-run&at=5000"), rounds)
        page_bytes = len(client.get("/run?id=long-run&page=37").content)
        load_batch = median_ms(lambda: store.load("batch"), rounds)
        inbox = cold("/approvals")
        batch_page = cold("/run?id=batch")
        oldest = cold("/?sort=oldest")
        by_status = cold(f"/?sort=status&after={deep}")
        deep_newest = cold(f"/?after={deep}")
        counted = median_ms(lambda: store.count_runs("completed", exact_up_to=10_000), rounds * 4)
        estimate = str(store.count_runs("completed", exact_up_to=10_000))
        info = median_ms(lambda: store.run_info("live-run"), rounds * 4)
        idle, grown = _live_looks(opener, path, rounds)

        rows = [
            ("runs list, page 1 (cold: 50 records read)", cold_first, query),
            ("runs list, page 1 (warm: records cached)", warm, query),
            (f"runs list, after {deep} (cold)", cold_deep, query_deep),
            (f"run page, {args.events:,} events, first view", first_view, load),
            ("run page, timeline page 37 (path cached)", later_page, load),
            ("run page, step-through at=5000", step, load),
            (f"inbox, a {args.batch:,}-call batch waiting (cold)", inbox, load_batch),
            (f"run page, a {args.batch:,}-call batch (cold)", batch_page, load_batch),
            ("runs list, oldest first (cold)", oldest, query),
            (f"runs list, by status, after {deep} (cold)", by_status, query_deep),
            (f"runs list, newest first, after {deep} (cold)", deep_newest, query_deep),
            (f"count of 'completed' past 10,000 ({estimate})", counted, query),
            ("live: a look at a run that did not move", idle, info),
            (f"live: a {args.events:,}-event run's page sent 5 new rows", grown, info),
        ]
        print(f"{'what':<48} {'ms':>9} {'bare ms':>9} {'ratio':>7}")
        for what, ms, bare in rows:
            print(f"{what:<48} {ms:>9.1f} {bare:>9.2f} {ms / bare:>6.1f}x")
        print("bare: store.runs(limit=50) for the runs list, store.load('long-run') for the run, "
              "store.load('batch') for the batch, store.run_info for a live look")  # fmt: skip
        print(f"a timeline page of the long run is {page_bytes / 1024:.0f} KiB of HTML "
              f"(100 events of {args.events:,})")  # fmt: skip
        print(f"the inbox with the {args.batch:,}-call batch is "
              f"{sizes['/approvals'] / 1024:.0f} KiB, its run page "
              f"{sizes['/run?id=batch'] / 1024:.0f} KiB")  # fmt: skip
        store.close()
        if args.beside:
            _light_beside_heavy(Path(tmp) / "beside.db", args.beside, rounds)


def _light_beside_heavy(path: Path, events: int, rounds: int) -> None:
    """The light requests' time against the heavy first view's, each round on a fresh server."""
    import threading

    import httpx
    import uvicorn

    from agentfsm.ui._server import Server, bind

    with SQLiteEventStore(path, synchronous="NORMAL") as store:
        for i in range(3):
            store.append(f"short-{i}", short_run(f"short-{i}", i), 0)
    heavy = long_run("heavy", events)
    no_snapshots = StoreOptions(snapshot_every=None)
    with SQLiteEventStore(path, synchronous="NORMAL", options=no_snapshots) as store:
        for start in range(0, len(heavy), 2000):
            store.append("heavy", heavy[start : start + 2000], start)

    def opener(table: TransitionTable) -> EventStore:
        return SQLiteEventStore(path, options=StoreOptions(reducer=Reducer(table), cache_size=0))

    lights, heavies = [], []
    for _ in range(rounds):
        app = create_app(Source(opener), UIConfig(token="x" * 20))
        sock = bind("127.0.0.1", 0)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        server = Server(config, app)
        serving = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
        serving.start()
        while not server.started:
            time.sleep(0.01)
        took: dict[str, float] = {}

        def first_view(url: str = url, took: dict[str, float] = took) -> None:
            start = time.perf_counter()
            with httpx.Client(base_url=url, timeout=120) as c:
                c.get("/run", params={"id": "heavy"}).raise_for_status()
            took["heavy"] = time.perf_counter() - start

        viewing = threading.Thread(target=first_view)
        viewing.start()
        time.sleep(0.3)
        with httpx.Client(base_url=url, timeout=120) as c:
            start = time.perf_counter()
            c.get("/run/version", params={"id": "short-0"}).raise_for_status()
            c.get("/").raise_for_status()
            lights.append(time.perf_counter() - start)
        viewing.join()
        heavies.append(took["heavy"])
        server.should_exit = True
        serving.join()
        sock.close()
    light, view = statistics.median(lights) * 1000, statistics.median(heavies) * 1000
    print(f"beside the first view of a {events:,}-event run ({view:.0f} ms): a version poll "
          f"and the runs list took {light:.0f} ms ({light / view:.2f} of it; medians of "
          f"{rounds})")  # fmt: skip


def _live_looks(
    opener: Callable[[TransitionTable], EventStore], path: Path, rounds: int
) -> tuple[float, float]:
    """A live run page's stream: the median ms of one look at the run while it stands
    still, and of the look after a tool turn (5 events) was appended (the turn's rows
    rendered, the run's path folded on by those 5 events, not refolded whole)."""
    from agentfsm.ui._feeds import RunFeed
    from agentfsm.ui.app import create_app

    source = Source(opener)
    app = create_app(source, UIConfig(token="x" * 22, allowed_hosts=("testserver",)))
    client = TestClient(app)
    client.get("/run?id=live-run")  # the page: its path folded once
    version = source.info("live-run").version
    feed = RunFeed(source, lambda name, **c: name, "live-run", version, version + 10_000)
    # The look itself, as the stream's loop has it done on the thread pool.
    feed._look()  # the first look (as the page showed it)
    idle = median_ms(feed._look, rounds * 4)
    writer = SQLiteEventStore(path)
    times = []
    for i in range(rounds):
        at = writer.run_info("live-run").version
        turn = LogBuilder("live-run", start=at + 1)
        calls = [{"action_id": f"live{i}", "tool": "lookup", "arguments": {"n": i}}]
        turn.add("model.started")
        turn.add("model.completed", decision="tool_calls", tool_calls=calls)
        turn.add("tool.requested", action_id=f"live{i}", tool="lookup", arguments={"n": i})
        turn.add("tool.started", action_id=f"live{i}")
        turn.add("tool.completed", action_id=f"live{i}", result={"n": i})
        writer.append("live-run", turn.events, at)
        start = time.perf_counter()
        sent = feed._look()
        times.append(time.perf_counter() - start)
        assert sent, "the look sent nothing"
    writer.close()
    source.close()
    return idle, statistics.median(times) * 1000


if __name__ == "__main__":
    main()
