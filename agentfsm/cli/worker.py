"""`agentfsm worker`: one worker process of the Procrastinate engine (see docs/runtime.md).

`--runner MODULE:ATTR` names the application's function that makes the Runner for a store
(its agents, tools and guards), as `ProcrastinateEngine(runner=...)` takes it; `--table`
the table(s) its runs are under. The worker checks the database's schema first (and
refuses to start, naming the command, when it is behind: `agentfsm setup`), then takes
jobs until SIGTERM or SIGINT.

Stopping: SIGTERM takes no more jobs; a job driving a run lets a tool call under way
finish, then hands the run back (queued again, its lease released, so another worker takes
it at once, not after a heartbeat timeout), and the process exits 0.

Logs: one JSON object a line on stderr (`--log-format text` for people), from agentfsm
and from Procrastinate alike, at `--log-level` (default info).

Timing: `--heartbeat SECONDS` between the worker's heartbeats (they keep its runs' leases
alive too), `--stalled-after SECONDS` without one after which its jobs are run elsewhere;
the engine's defaults (1 and 4) unless given. The second must exceed the first (a live
worker must never look stalled between two heartbeats): otherwise a usage error, exit 2.

Readiness: once registered and taking jobs, the worker logs `worker.ready` and, with
`--ready-file PATH`, writes its pid to PATH (removed at exit). A file because an exec probe
(`test -f`), a systemd `ExecStartPost`, or a test, can wait for it without parsing logs or
opening a port per worker; the log line is for whoever reads the logs.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, load_tables
from agentfsm.cli._store import ENV, add_store_argument
from agentfsm.cli.control import command

__all__ = ["add_parsers", "configure_logging", "import_object", "postgres_url"]

_LEVELS = ("debug", "info", "warning", "error")


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm setup` and `agentfsm worker`."""
    _add_setup(subparsers)
    _add_worker(subparsers)


def _add_setup(subparsers: argparse._SubParsersAction[Parser]) -> None:
    p = command(
        subparsers, "setup", "create or upgrade the engine's schema in a PostgreSQL database",
        "agentfsm setup --store postgresql://db/agents   # before starting upgraded workers\n"
        "  agentfsm setup --store postgresql://db/agents --post   # once no old worker runs",
    )  # fmt: skip
    add_store_argument(p, table=False)
    p.add_argument(
        "--queue", type=_args.text, default="agentfsm", metavar="Q",
        help="the queue the command line queues wake-ups on (default 'agentfsm')",
    )  # fmt: skip
    p.add_argument(
        "--post", action="store_true",
        help="also apply Procrastinate's `post` migrations (only once every worker runs the "
        "new version)",
    )  # fmt: skip
    p.set_defaults(handler=_setup)


def _setup(args: argparse.Namespace) -> int:
    url = postgres_url(args.store, "setup")
    pq = engine_modules("setup")
    import psycopg

    engine = pq.ProcrastinateEngine(url, _no_runner, settings=pq.EngineSettings(queue=args.queue))
    try:
        applied = engine.migrate(post=args.post)
        now = engine.schema()
    except psycopg.Error as exc:
        raise UsageError(f"{PROG} setup: error: the store failed: {_one_line(exc)}") from None
    for name in applied:
        print(f"applied {name}")
    waiting = list(now.pending)
    print(f"procrastinate schema at {now.at}; engine queue '{args.queue}'")
    if waiting:
        print(
            f"{len(waiting)} post migration(s) wait until no older worker runs: "
            f"then `{PROG} setup --store URL --post`"
        )
    return 0


def _no_runner(store: Any) -> Any:
    raise AssertionError("setup drives no run")


def _add_worker(subparsers: argparse._SubParsersAction[Parser]) -> None:
    p = command(
        subparsers, "worker", "drive runs as Procrastinate jobs on PostgreSQL (one worker)",
        "agentfsm worker --store postgresql://db/agents --runner myapp.agents:make_runner "
        "--concurrency 4 --ready-file /run/agentfsm/ready",
    )  # fmt: skip
    add_store_argument(p)
    p.add_argument(
        "--runner", required=True, metavar="MODULE:ATTR",
        help="a function (store) -> Runner: the application's agents, tools and guards",
    )  # fmt: skip
    p.add_argument(
        "--concurrency", type=_positive, default=1, metavar="N",
        help="jobs driven at once, each on a thread with its own connection (default 1)",
    )  # fmt: skip
    p.add_argument(
        "--queue", action="append", type=_args.text, metavar="Q",
        help="a queue to take jobs from (repeatable: jobs are taken by priority, then age, "
        "across them, and the recovery pass covers each; default 'agentfsm'). A run's jobs "
        "stay in the queue its route chose at submission",
    )  # fmt: skip
    # Defaults None: the engine's own (EngineSettings), read once the engine is imported.
    p.add_argument(
        "--heartbeat", type=_interval, metavar="SECONDS",
        help="seconds between the worker's heartbeats, which also keep its runs' leases "
        "alive (default: the engine's, 1)",
    )  # fmt: skip
    p.add_argument(
        "--stalled-after", type=_interval, metavar="SECONDS",
        help="seconds without a heartbeat after which a worker's jobs are run elsewhere: "
        "more than --heartbeat, best several heartbeats, since a live worker must never "
        "look stalled; give every worker the same (default: the engine's, 4)",
    )  # fmt: skip
    p.add_argument("--name", type=_args.text, help="the worker's name (default: host-pid)")
    p.add_argument(
        "--ready-file", type=_args.path, metavar="PATH",
        help="write the pid here once the worker takes jobs (removed at exit)",
    )  # fmt: skip
    p.add_argument(
        "--metrics", action="store_true",
        help="record OpenTelemetry metrics (agentfsm.adapters.otel_metrics) on the global "
        "meter provider, e.g. as set up by `opentelemetry-instrument` (needs the otel extra)",
    )  # fmt: skip
    p.add_argument("--log-level", choices=_LEVELS, default="info", help="default: info")
    p.add_argument("--log-format", choices=("json", "text"), default="json", help="default: json")
    p.set_defaults(handler=_worker)


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: '{value}'") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def _interval(value: str) -> float:
    """A heartbeat's or a timeout's seconds: more than 0, at most a day."""
    found = _args.seconds(value)
    if found <= 0:
        raise argparse.ArgumentTypeError(f"want seconds more than 0, got '{value}'")
    return found


def postgres_url(spec: str | None, command: str) -> str:
    """The `postgresql://` URL from `--store` or `$AGENTFSM_STORE` (the engine's commands
    run on PostgreSQL only)."""
    spec = spec or os.environ.get(ENV)
    if not spec:
        raise UsageError(f"{PROG} {command}: give --store postgresql://... or set {ENV}")
    if not spec.startswith(("postgresql://", "postgres://")):
        raise UsageError(
            f"{PROG} {command}: the engine runs on PostgreSQL: --store wants a postgresql:// "
            f"URL, got '{spec}' (a SQLite store is driven by a Worker in the application)"
        )
    return spec


def import_object(spec: str, command: str, option: str) -> Any:
    """The object `MODULE:ATTR` names (the current directory importable, as for --table)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"{PROG} {command}: {option} wants MODULE:ATTR, got '{spec}'")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any failure of the user's module is reported alike
        raise UsageError(
            f"{PROG} {command}: cannot import '{module_name}': {type(exc).__name__}: {exc}"
        ) from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise UsageError(
            f"{PROG} {command}: module '{module_name}' has no attribute '{attr}'"
        ) from None


def engine_modules(command: str) -> Any:
    """`agentfsm.runtime.procrastinate`, or a usage error naming the extra."""
    try:
        from agentfsm.runtime import procrastinate
    except ImportError:
        raise UsageError(
            f"{PROG} {command}: the engine needs `pip install 'agentfsm[procrastinate]'`"
        ) from None
    return procrastinate


def configure_logging(level: str, fmt: str = "json") -> None:
    """The worker's logs: agentfsm's (structlog) and Procrastinate's (`logging`) alike, one
    line each on stderr, JSON by default. A process of ours, so configuring is ours to do."""
    import structlog

    number = getattr(logging, level.upper())
    stamp = structlog.processors.TimeStamper(fmt="iso", utc=True)
    render: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            stamp,
            structlog.processors.format_exc_info,
            render,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(number),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, render],
            foreign_pre_chain=[
                structlog.stdlib.add_log_level,
                structlog.stdlib.add_logger_name,
                stamp,
                structlog.stdlib.ExtraAdder(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(number)


def _worker(args: argparse.Namespace) -> int:
    url = postgres_url(args.store, "worker")
    pq = engine_modules("worker")
    defaults = pq.EngineSettings()
    heartbeat: float = defaults.heartbeat if args.heartbeat is None else args.heartbeat
    stalled: float = defaults.stalled_after if args.stalled_after is None else args.stalled_after
    if stalled <= heartbeat:
        # Between two heartbeats a live worker would look stalled, and its runs be taken.
        raise UsageError(
            f"{PROG} worker: --stalled-after ({stalled:g} s) must be more than --heartbeat "
            f"({heartbeat:g} s), best several heartbeats: a live worker must never look "
            "stalled"
        )
    import psycopg
    import structlog

    from agentfsm.reducers.reduce import Reducer
    from agentfsm.stores.base import StoreOptions

    make_runner = import_object(args.runner, "worker", "--runner")
    if not callable(make_runner):
        raise UsageError(
            f"{PROG} worker: --runner '{args.runner}' is a {type(make_runner).__name__}, not "
            "a function (store) -> Runner"
        )
    tables = load_tables(args.table, "worker")
    options = StoreOptions(reducer=Reducer(tables[0], tables=tables)) if tables else None
    queues: list[str] = args.queue or ["agentfsm"]
    settings = pq.EngineSettings(
        queue=queues[0], concurrency=args.concurrency, heartbeat=heartbeat,
        stalled_after=stalled,
    )  # fmt: skip
    name = args.name or f"{socket.gethostname()}-{os.getpid()}"
    configure_logging(args.log_level, args.log_format)
    log = structlog.get_logger("agentfsm.worker")
    metrics = _metrics(url) if args.metrics else None
    engine = pq.ProcrastinateEngine(
        url, make_runner, settings=settings, options=options, metrics=metrics
    )
    ready_file: Path | None = args.ready_file
    try:
        engine.check_schema()
    except pq.SchemaBehindError as exc:
        raise UsageError(f"{PROG} worker: refused: {exc}") from None
    except psycopg.Error as exc:
        raise UsageError(f"{PROG} worker: error: the store failed: {_one_line(exc)}") from None

    def ready() -> None:
        log.info(
            "worker.ready", worker=name, queues=queues, concurrency=args.concurrency,
            heartbeat=settings.heartbeat, stalled_after=settings.stalled_after, pid=os.getpid(),
        )  # fmt: skip
        if ready_file is not None:
            _write_atomically(ready_file, f"{os.getpid()}\n")

    try:
        asyncio.run(engine.aserve(name=name, queues=queues, on_ready=ready))
    except psycopg.Error as exc:
        log.error("worker.failed", worker=name, error=_one_line(exc))
        raise UsageError(f"{PROG} worker: error: the store failed: {_one_line(exc)}") from None
    finally:
        if ready_file is not None:
            ready_file.unlink(missing_ok=True)
    log.info("worker.stopped", worker=name)
    return 0


def _metrics(url: str) -> Any:
    try:
        from opentelemetry import metrics

        from agentfsm.adapters.otel_metrics import EngineMetrics
    except ImportError:
        raise UsageError(f"{PROG} worker: --metrics needs `pip install 'agentfsm[otel]'`") from None
    return EngineMetrics(metrics.get_meter("agentfsm"), url)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _write_atomically(path: Path, text: str) -> None:
    part = path.with_name(f".{path.name}.part")
    part.write_text(text)
    part.replace(path)
