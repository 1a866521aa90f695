"""Process-level checks for a store: writers racing on one run, and writers killed mid-append.

Both need real processes (threads would share one handle's memory and hide exactly the
bugs these look for), so the store is described by a *factory*: a picklable callable
that opens a new handle on the shared storage in whichever process calls it, e.g.
`functools.partial(SQLiteEventStore, "/tmp/x.db")`. Children are started with the
`forkserver` method, so they inherit nothing but the factory.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

from agentfsm.errors import ConcurrencyConflictError, RunNotFoundError
from agentfsm.events.models import Event
from agentfsm.stores.base import EventStore
from agentfsm.testing._stores.scripted import run_started, tool_turn

__all__ = [
    "CrashReport",
    "RaceReport",
    "StoreFactory",
    "crash_trials",
    "race_appends",
]

#: Opens a new handle on the shared storage; must pickle (a module-level callable or a
#: `functools.partial` of one) to reach a child process.
StoreFactory = Callable[[], EventStore]


def _context(factory: StoreFactory) -> Any:
    # The fork server imports these once, so each child starts in milliseconds instead of
    # importing pydantic, psycopg & co. anew. (It takes effect when the fork server first
    # starts; modules that fail to import are skipped by multiprocessing.)
    target = getattr(factory, "func", factory)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        [__name__, "agentfsm.stores.postgres", getattr(target, "__module__", __name__)]
    )
    return ctx


def _ack(fd: int, line: str) -> None:
    # One write() of a short line: after SIGKILL it is either in the file or not at all.
    os.write(fd, line.encode() + b"\n")


def _read_lines(path: Path) -> list[list[str]]:
    if not path.exists():
        return []
    return [line.split() for line in path.read_text().splitlines() if line.strip()]


def _action_ids(store: EventStore, run_id: str) -> list[str]:
    return [e.action_id for e in store.events(run_id) if e.type == "tool.requested"]


# -- racing writers ------------------------------------------------------------------------


@attrs.frozen
class RaceReport:
    """What `race_appends` saw.

    Attributes:
        writers: how many processes raced.
        appends: acknowledged appends per writer (each a whole tool turn).
        conflicts: conflicts per writer (each one a retried attempt).
        final_version: the run's version afterwards.
        problems: every violation found (empty when the store behaved).
    """

    writers: int
    appends: int
    conflicts: tuple[int, ...]
    final_version: int
    problems: tuple[str, ...]

    @property
    def total_conflicts(self) -> int:
        """Conflicts over all writers."""
        return sum(self.conflicts)


def _race_writer(
    factory: StoreFactory, run_id: str, writer: int, appends: int, ack_path: str, go: Any
) -> None:
    store = factory()
    fd = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    conflicts = 0
    go.wait()
    for k in range(appends):
        while True:
            version = store.run_info(run_id).version
            try:
                store.append(run_id, tool_turn(run_id, version + 1, f"w{writer}-{k}"), version)
            except ConcurrencyConflictError:
                conflicts += 1
                continue
            _ack(fd, f"ack w{writer}-{k}")
            break
    _ack(fd, f"conflicts {conflicts}")
    os.close(fd)
    store.close()


def race_appends(
    factory: StoreFactory, workdir: Path, *, run_id: str, writers: int = 4, appends: int = 20
) -> RaceReport:
    """Start a run, then let `writers` processes each append `appends` tool turns to it at
    once, reloading and retrying on every conflict. Checks that the final log is a valid run
    (verify), that every acknowledged append is in it exactly once, and that nothing else is.
    """
    with factory() as store:
        store.append(run_id, [run_started(run_id)], 0)
    ctx = _context(factory)
    go = ctx.Event()
    paths = [workdir / f"race-{run_id}-{w}.log" for w in range(writers)]
    procs = [
        ctx.Process(target=_race_writer, args=(factory, run_id, w, appends, str(paths[w]), go))
        for w in range(writers)
    ]
    for proc in procs:
        proc.start()
    go.set()
    problems: list[str] = []
    for w, proc in enumerate(procs):
        proc.join(timeout=300)
        if proc.exitcode != 0:
            problems.append(f"writer {w} exited with {proc.exitcode}")
    acked: list[str] = []
    conflicts: list[int] = []
    for path in paths:
        lines = _read_lines(path)
        acked.extend(parts[1] for parts in lines if parts[0] == "ack")
        conflicts.extend(int(parts[1]) for parts in lines if parts[0] == "conflicts")
    with factory() as store:
        report = store.verify(run_id)
        if not report.ok:
            problems.append(f"verify: {report}")
        stored = Counter(_action_ids(store, run_id))
        final_version = store.run_info(run_id).version
    for action in acked:
        if stored[action] != 1:
            problems.append(f"acknowledged append {action} is stored {stored[action]} times")
    for action in sorted(set(stored) - set(acked)):
        problems.append(f"append {action} is stored but was never acknowledged")
    if final_version != 1 + 5 * len(acked):
        problems.append(f"version {final_version} after {len(acked)} acknowledged turns")
    return RaceReport(writers, appends, tuple(conflicts), final_version, tuple(problems))


# -- writers killed mid-append ----------------------------------------------------------------


@attrs.frozen
class CrashReport:
    """What `crash_trials` saw.

    Attributes:
        trials: processes killed.
        acknowledged: batches acknowledged before the kills, over all trials.
        in_flight_committed: trials where the batch in flight at the kill was committed
            (allowed: the process died between the commit and its acknowledgement).
        problems: every violation found (empty when the store behaved).
    """

    trials: int
    acknowledged: int
    in_flight_committed: int
    problems: tuple[str, ...]


def _crash_writer(factory: StoreFactory, run_id: str, ack_path: str, seed: int, ready: Any) -> None:
    store = factory()
    fd = os.open(ack_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    rng = random.Random(seed)  # noqa: S311  (seeded test schedule, not cryptography)
    ready.set()
    version = 0
    batch = 0
    while True:
        turns = rng.randint(1, 3)
        events: list[Event] = [run_started(run_id)] if version == 0 else []
        for t in range(turns):
            events.extend(tool_turn(run_id, version + len(events) + 1, f"b{batch}t{t}"))
        _ack(fd, f"intent {batch} {turns}")
        version = store.append(run_id, events, version).version
        _ack(fd, f"ack {batch}")
        batch += 1


def _check_crash(store: EventStore, run_id: str, lines: list[list[str]]) -> tuple[list[str], bool]:
    intents = {int(p[1]): int(p[2]) for p in lines if p[0] == "intent"}
    acked = {int(p[1]) for p in lines if p[0] == "ack"}
    try:
        actions = _action_ids(store, run_id)
    except RunNotFoundError:
        actions = []
    problems: list[str] = []
    if actions:
        report = store.verify(run_id)
        if not report.ok:
            problems.append(f"verify: {report}")
    per_batch = Counter(int(a[1:].split("t")[0]) for a in actions)
    for batch in sorted(per_batch):
        if per_batch[batch] != intents.get(batch):
            problems.append(
                f"batch {batch} has {per_batch[batch]} of {intents.get(batch)} turns stored"
            )
    for batch in sorted(acked - set(per_batch)):
        problems.append(f"acknowledged batch {batch} is missing")
    unacked = sorted(set(per_batch) - acked)
    if len(unacked) > 1 or (unacked and unacked[0] != max(intents)):
        problems.append(f"unacknowledged batches {unacked} are stored")
    return problems, bool(unacked)


def crash_trials(
    factory: StoreFactory,
    workdir: Path,
    *,
    trials: int,
    seed: int,
    run_prefix: str = "crash",
    max_delay: float = 0.03,
) -> CrashReport:
    """Kill a writer with SIGKILL at a random (seeded) moment, `trials` times, and check
    after each kill, from a fresh handle: every acknowledged batch is stored, no batch is
    stored in part, at most the one batch in flight is stored unacknowledged, and the hash
    chain verifies. Each trial writes its own run, in the same shared storage."""
    ctx = _context(factory)
    rng = random.Random(seed)  # noqa: S311  (seeded test schedule, not cryptography)
    problems: list[str] = []
    acknowledged = 0
    committed_in_flight = 0
    for trial in range(trials):
        run_id = f"{run_prefix}-{trial}"
        ack_path = workdir / f"{run_id}.log"
        ready = ctx.Event()
        proc = ctx.Process(
            target=_crash_writer,
            args=(factory, run_id, str(ack_path), rng.randrange(2**32), ready),
        )
        proc.start()
        if not ready.wait(timeout=60):
            problems.append(f"trial {trial}: the writer did not start")
        time.sleep(rng.uniform(0, max_delay))
        if proc.pid is not None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=60)
        if proc.exitcode != -signal.SIGKILL:
            problems.append(f"trial {trial}: the writer ended by itself ({proc.exitcode})")
        lines = _read_lines(ack_path)
        acknowledged += sum(1 for p in lines if p[0] == "ack")
        with factory() as store:
            found, in_flight = _check_crash(store, run_id, lines)
        committed_in_flight += in_flight
        problems.extend(f"trial {trial} ({run_id}): {p}" for p in found)
    return CrashReport(trials, acknowledged, committed_in_flight, tuple(problems))
