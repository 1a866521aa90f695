"""One driver per run: every driver holds the run's lease, and a live call is never unknown.

The issue's two attacks, on the memory, SQLite and PostgreSQL stores: a second
`Runner.drive` while the first Runner is inside a slow tool used to record
`tool.outcome_unknown` for a call whose worker was alive (and drop its real result), and an
`agentfsm migrate` during a tool crashed the Runner with `TableMismatchError`. Now the second
driver is refused at once, naming the holder (or waits, `wait=`), the steering verbs that
would change the run under its driver refuse too, and a call in flight becomes
`outcome_unknown` only for a driver that took the lease over from one whose heartbeat
stopped. The tools here block on an `Event`, not a sleep.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentfsm.errors import RunHeldError, RunNotFoundError
from agentfsm.events import Limits
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.reducers import Reducer
from agentfsm.runtime import (
    Decision,
    ProposedCall,
    RunnerConfig,
    RunResult,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolPolicy,
    append_event,
    approve,
    cancel,
    migrate,
    pause,
    reject,
    resume,
    submit,
)
from agentfsm.stores import (
    EventStore,
    MemoryEventStore,
    MemoryStorage,
    SQLiteEventStore,
    StoreOptions,
)
from agentfsm.stores.memory import MemoryLeaseTable

from .helpers import runner_for, types, validate

V2 = DEFAULT_TABLE.derive(name="agent-run-v2")
TOOL_WAIT = 30.0


class Handles:
    """Handles on one store's storage (each driver gets its own, as a process would)."""

    def __init__(self, make: Callable[[StoreOptions | None], EventStore]) -> None:
        self._make = make
        self.opened: list[EventStore] = []

    def __call__(self, options: StoreOptions | None = None) -> EventStore:
        store = self._make(options)
        self.opened.append(store)
        return store

    def close(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def handles(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Handles]:
    """A factory of handles on one fresh store of each kind."""
    if request.param == "memory":
        storage = MemoryStorage()
        made = Handles(lambda options: MemoryEventStore(storage, options=options))
    elif request.param == "sqlite":
        path = tmp_path / "runs.db"
        made = Handles(lambda options: SQLiteEventStore(path, options=options))
    else:
        from agentfsm.stores.postgres import PostgresEventStore

        dsn = request.getfixturevalue("postgres_dsn")
        prefix = request.getfixturevalue("pg_prefix")
        PostgresEventStore(dsn, table_prefix=prefix, migrate=True).close()
        made = Handles(
            lambda options: PostgresEventStore(dsn, options=options, table_prefix=prefix)
        )
    try:
        yield made
    finally:
        made.close()


class Gate:
    """A tool that blocks until told to go on: the issue's 4 s tool, without the 4 s."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.calls: list[str] = []

    def tool(self, name: str = "send_email") -> Tool:
        def fn(ctx: ToolContext) -> Any:
            self.calls.append(ctx.idempotency_key)
            self.entered.set()
            assert self.go.wait(TOOL_WAIT), "the test never let the tool go on"
            return {"sent": ctx.args["to"]}

        return Tool(name, fn)  # side effects, not idempotent: never to be run twice


def _mail_model() -> ScriptedModel:
    return ScriptedModel(
        [
            Decision.call_tools(ProposedCall("send_email", {"to": "ann@example.com"})),
            lambda ctx: Decision.answer(f"{ctx.results[0].status}: {ctx.results[0].result}"),
        ],
        by_turn=True,
    )


class Driving:
    """Runner 1 driving run `r1` on a thread, stopped inside the gated tool."""

    def __init__(self, store: EventStore, gate: Gate, **runner: Any) -> None:
        self.gate = gate
        self.result: list[RunResult] = []
        self.error: list[BaseException] = []
        runner_ = runner_for(store, _mail_model(), [gate.tool()], **runner)
        self.thread = threading.Thread(target=self._drive, args=(runner_,), daemon=True)
        self.thread.start()
        assert gate.entered.wait(TOOL_WAIT)

    def _drive(self, runner: Any) -> None:
        try:
            self.result.append(runner.run("r1", "mail ann"))
        except BaseException as exc:  # noqa: BLE001  (the test asserts there was none)
            self.error.append(exc)

    def finish(self) -> RunResult:
        self.gate.go.set()
        self.thread.join(TOOL_WAIT)
        assert self.error == []
        (result,) = self.result
        return result


class TestASecondDriver:
    """The issue's attacks: a second driver while the first is inside a slow tool."""

    def test_a_second_drive_during_a_slow_tool_is_refused_and_the_result_kept(
        self, handles: Handles
    ) -> None:
        """Runner 2 is refused at once, naming Runner 1's lease; Runner 1 records the tool's
        real result and completes; the call ran once and nothing is `outcome_unknown`."""
        gate = Gate()
        first = Driving(handles(), gate)
        second = handles()
        with pytest.raises(RunHeldError) as info:
            runner_for(second, _mail_model(), [gate.tool()]).drive("r1")
        held = info.value.holder
        assert (held.run_id, held.host, held.pid) == ("r1", socket.gethostname(), os.getpid())
        assert held.id.startswith("runner-")
        assert str(info.value) == (
            f"run 'r1' is being driven by {held.describe()}; wait for it or stop it"
        )
        done = first.finish()
        assert (done.status, done.superseded) == ("completed", False)
        assert done.final_output == "succeeded: {'sent': 'ann@example.com'}"
        assert gate.calls == ["r1:t1.1"]
        assert "tool.outcome_unknown" not in types(second, "r1")
        assert validate(second, ["r1"]).ok
        assert second.holder("r1") is None

    def test_migrate_during_a_tool_is_refused_and_the_run_goes_on(self, handles: Handles) -> None:
        """`migrate` while a live driver holds the run: refused, nothing written; the driver
        is not crashed and records the tool's result."""
        gate = Gate()
        first = Driving(handles(), gate)
        steering = handles(StoreOptions(reducer=Reducer(DEFAULT_TABLE, tables=[V2])))
        before = steering.load("r1").version
        with pytest.raises(RunHeldError) as info:
            migrate(steering, "r1", to=V2, by="ann", reason="v2 is out")
        assert str(info.value) == (
            f"run 'r1' is being driven by {info.value.holder.describe()}; wait for it or stop it"
        )
        assert steering.load("r1").version == before
        done = first.finish()
        assert (done.status, done.final_output) == (
            "completed",
            "succeeded: {'sent': 'ann@example.com'}",
        )
        assert "run.migrated" not in types(steering, "r1")

    def test_with_wait_the_second_drive_goes_once_the_first_lets_go(self, handles: Handles) -> None:
        """`drive(wait=...)` waits for the holder; here the first finishes the run, so the
        second finds it completed and does nothing."""
        gate = Gate()
        first = Driving(handles(), gate)
        second = handles()
        threading.Timer(0.3, gate.go.set).start()
        started = time.monotonic()
        again = runner_for(second, _mail_model(), [gate.tool()]).drive("r1", wait=TOOL_WAIT)
        assert time.monotonic() - started < TOOL_WAIT
        assert (again.status, gate.calls) == ("completed", ["r1:t1.1"])
        assert first.finish().status == "completed"
        assert types(second, "r1").count("run.completed") == 1


class TestTheRefusal:
    """What the refusal says, read on a clock the test holds still."""

    @staticmethod
    def _store(now: list[float]) -> MemoryEventStore:
        return MemoryEventStore(MemoryStorage(leases=MemoryLeaseTable(clock=lambda: now[0])))

    def test_it_names_the_holder_its_process_and_its_last_heartbeat(self) -> None:
        """`run 'r1' is being driven by 'ann-script' (pid P on HOST, heartbeat 2 s ago)`."""
        now = [1_000.0]
        store = self._store(now)
        submit(store, "r1")
        store.hold("r1", holder="ann-script")
        now[0] += 2.4
        with pytest.raises(RunHeldError) as info:
            runner_for(store, _mail_model(), []).drive("r1")
        assert str(info.value) == (
            f"run 'r1' is being driven by 'ann-script' (pid {os.getpid()} on "
            f"{socket.gethostname()}, heartbeat 2 s ago); wait for it or stop it"
        )
        assert store.holder("r1") == info.value.holder

    def test_a_subagent_run_is_held_with_its_root(self) -> None:
        """A subagent run is driven by its root's driver: the refusal names both."""
        now = [1_000.0]
        store = self._store(now)
        store.hold("r1", holder="w1")
        with pytest.raises(RunHeldError) as info:
            store.hold("r1/t1.1")
        assert str(info.value) == (
            f"run 'r1/t1.1' (with its root 'r1') is being driven by 'w1' (pid {os.getpid()} "
            f"on {socket.gethostname()}, heartbeat 0 s ago); wait for it or stop it"
        )

    def test_waiting_in_vain_says_how_long(self) -> None:
        """`wait=0.2` on a lease nobody lets go: refused after waiting, and it says so."""
        store = MemoryEventStore()
        submit(store, "r1")
        store.hold("r1", holder="w1")
        started = time.monotonic()
        with pytest.raises(RunHeldError) as info:
            runner_for(store, _mail_model(), []).drive("r1", wait=0.2)
        assert 0.2 <= time.monotonic() - started < 5
        assert info.value.waited == 0.2
        assert str(info.value).endswith(
            "heartbeat 0 s ago), still after waiting 0.2 s; wait for it or stop it"
        )


class TestSteering:
    """Verbs that would change a run under its driver refuse; what a run expects goes in."""

    def test_pause_append_and_migrate_refuse_while_a_driver_holds_the_run(
        self, handles: Handles
    ) -> None:
        """Each is refused with the holder named, and nothing is written."""
        store = handles(StoreOptions(reducer=Reducer(DEFAULT_TABLE, tables=[V2])))
        submit(store, "r1")
        lease = store.hold("r1", holder="w1")
        verbs: list[Callable[[], Any]] = [
            lambda: pause(store, "r1", "lunch"),
            lambda: append_event(store, "r1", "run.paused", reason="lunch"),
            lambda: migrate(store, "r1", to=V2, by="ann", reason="v2"),
        ]
        for verb in verbs:
            with pytest.raises(RunHeldError) as info:
                verb()
            assert str(info.value).startswith("run 'r1' is being driven by 'w1' (pid ")
        assert types(store, "r1") == ["run.started"]
        lease.release()
        assert pause(store, "r1", "lunch").status == "paused"

    def test_a_steering_verb_waits_for_the_driver_when_asked_to(self, handles: Handles) -> None:
        """`pause(..., wait=5)` goes through once the driver lets go."""
        store = handles()
        submit(store, "r1")
        lease = store.hold("r1", holder="w1")
        threading.Timer(0.3, lease.release).start()
        assert pause(store, "r1", "lunch", wait=5).status == "paused"

    def test_approve_reject_cancel_and_resume_go_in_while_a_driver_holds_the_run(
        self, handles: Handles
    ) -> None:
        """Decisions and a cancel are what a waiting or running run expects."""
        store = handles()
        policy = ToolPolicy(approval={"send_email"})
        model = ScriptedModel(
            [
                Decision.call_tools(
                    ProposedCall("send_email", {"to": "a"}), ProposedCall("send_email", {"to": "b"})
                )
            ]
        )
        runner_for(store, model, [Gate().tool()], policy=policy).run("r1")
        held = store.hold("r1", holder="w1")
        assert approve(store, "r1", "t1.1", "ann").pending_approvals == ("t1.2",)
        assert reject(store, "r1", "t1.2", "ann", "no").pending_approvals == ()
        assert cancel(store, "r1", reason="stop").status == "cancel_requested"
        held.release()
        submit(store, "r2")
        pause(store, "r2", "lunch")
        store.hold("r2", holder="w1")
        assert resume(store, "r2").status == "running"


def _left_in_flight(store: EventStore) -> None:
    """What a driver of `r1` left in the log before it froze or died: `send_email` started."""
    from agentfsm.events import make_event

    record = store.load("r1")
    at = "2026-09-01T10:00:05+00:00"
    n = record.version
    call_ = {"action_id": "t1.1", "tool": "send_email", "arguments": {"to": "a"}}
    store.append(
        "r1",
        [
            make_event("model.started", run_id="r1", sequence=n + 1, occurred_at=at),
            make_event(
                "model.completed", run_id="r1", sequence=n + 2, occurred_at=at,
                decision="tool_calls", tool_calls=[call_],
            ),
            make_event("tool.requested", run_id="r1", sequence=n + 3, occurred_at=at, **call_),
            make_event(
                "tool.started", run_id="r1", sequence=n + 4, occurred_at=at, action_id="t1.1"
            ),
        ],
        n,
    )  # fmt: skip


class TestTakeover:
    """Only a lease whose heartbeat stopped is taken over; only then is a call unknown."""

    def test_a_lease_whose_heartbeat_stopped_is_taken_over_and_its_call_named(
        self, handles: Handles
    ) -> None:
        """A driver froze inside its call (its lease, 0.3 s, not renewed): refused while the
        lease lasts, taken over after; the call is `outcome_unknown` with who held it."""
        store = handles()
        submit(store, "r1", limits=Limits(max_turns=3))
        frozen = store.hold("r1", ttl=0.3, holder="frozen-runner")
        _left_in_flight(store)
        gate = Gate()
        answer = ScriptedModel([lambda ctx: Decision.answer(ctx.results[0].status)])
        other = handles()
        with pytest.raises(RunHeldError):
            runner_for(other, answer, [gate.tool()]).drive("r1")
        stopped = other.holder("r1")
        assert stopped is not None
        assert stopped.heartbeat is not None
        time.sleep(0.4)
        assert other.holder("r1") is None  # its heartbeat stopped: nobody drives it
        done = runner_for(other, answer, [gate.tool()]).drive("r1")
        assert (done.status, done.final_output, gate.calls) == ("completed", "unknown", [])
        (unknown,) = done.unknown_outcomes
        assert unknown.reason == (
            "the worker stopped while attempt 1 was in flight (its lease was held by "
            f"'frozen-runner' (pid {os.getpid()} on {socket.gethostname()}), whose last "
            f"heartbeat was at {stopped.heartbeat.isoformat()}); 'send_email' has side "
            "effects and is not idempotent, so it was not run again"
        )
        assert frozen.lost


class TestHeartbeat:
    """The lease is renewed on its own clock while tools run, and a lost one stops writes."""

    def test_a_call_longer_than_the_ttl_keeps_its_lease(self, handles: Handles) -> None:
        """A 0.3 s lease, a 1.2 s call: held throughout (renewed every 0.1 s), completed."""
        gate = Gate()
        first = Driving(handles(), gate, config=RunnerConfig(lease_ttl=0.3))
        other = handles()
        seen = []
        for _ in range(12):
            time.sleep(0.1)
            found = other.holder("r1")
            seen.append(found is not None and found.live)
        done = first.finish()
        assert seen == [True] * 12
        assert (done.status, done.superseded) == ("completed", False)

    def test_a_driver_whose_lease_was_taken_over_stops_before_its_next_write(self) -> None:
        """Runner 1's lease lapses in the store's time while its call runs (a partition);
        Runner 2 takes it over and settles the call; Runner 1's heartbeat is refused, and it
        returns superseded without writing the late result."""
        now = [1_000.0]
        storage = MemoryStorage(leases=MemoryLeaseTable(clock=lambda: now[0]))
        gate = Gate()
        config = RunnerConfig(lease_ttl=0.3)
        first = Driving(MemoryEventStore(storage), gate, config=config)
        now[0] += 60  # the store sees no heartbeat for a minute
        second = MemoryEventStore(storage)
        answer = ScriptedModel([lambda ctx: Decision.answer(ctx.results[0].status)])
        done = runner_for(second, answer, [Gate().tool()]).drive("r1")
        assert (done.status, done.final_output) == ("completed", "unknown")
        time.sleep(0.3)  # Runner 1's next renewals (every 0.1 s) are refused meanwhile
        late = first.finish()
        # It stopped on its lease, before sending its append: its record is where it was.
        assert (late.superseded, late.status) == (True, "waiting_tool")
        assert "tool.completed" not in types(second, "r1")
        assert validate(second, ["r1"]).ok


def _frozen_child(path: str, ttl: float, go: str) -> None:
    """In a child process: drive `r1` on SQLite into a call that waits for the file `go`."""
    import json
    import logging

    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))

    def send(ctx: ToolContext) -> Any:
        while not os.path.exists(go):
            time.sleep(0.02)
        return "sent"

    store = SQLiteEventStore(path)
    runner = runner_for(store, _mail_model(), [Tool("send_email", send)],
                        config=RunnerConfig(lease_ttl=ttl))  # fmt: skip
    result = runner.run("r1", "mail ann")
    with open(go + ".out", "w", encoding="utf-8") as out:
        json.dump([result.status, result.superseded], out)


def _child(tmp_path: Path, ttl: float) -> tuple[Any, Path, SQLiteEventStore]:
    import multiprocessing

    go = tmp_path / "go"
    proc = multiprocessing.get_context("fork").Process(
        target=_frozen_child, args=(str(tmp_path / "runs.db"), ttl, str(go))
    )
    proc.start()
    store = SQLiteEventStore(tmp_path / "runs.db")
    deadline = time.monotonic() + TOOL_WAIT
    while time.monotonic() < deadline:
        try:
            if "tool.started" in types(store, "r1"):
                return proc, go, store
        except RunNotFoundError:  # the child has not started the run yet
            pass
        time.sleep(0.02)
    raise AssertionError("the child never started its call")


class TestProcesses:
    """Real processes on SQLite: the dead are taken over at once, the frozen after the ttl."""

    def test_a_sigkilled_driver_is_taken_over_at_once_on_its_host(self, tmp_path: Path) -> None:
        """Killed inside its call with a 30 s lease: its pid is gone, so the next resume
        takes the run at once; the call is unknown, naming the dead holder's pid."""
        import signal

        proc, _, store = _child(tmp_path, ttl=30.0)
        dead = store.holder("r1")
        assert dead is not None
        assert dead.pid == proc.pid
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        answer = ScriptedModel([lambda ctx: Decision.answer(ctx.results[0].status)])
        done = runner_for(store, answer, [Gate().tool()]).drive("r1")
        (unknown,) = done.unknown_outcomes
        assert unknown.reason is not None
        assert unknown.reason.startswith(
            "the worker stopped while attempt 1 was in flight (its lease was held by "
            f"'{dead.id}' (pid {proc.pid} on {socket.gethostname()}), whose last heartbeat "
            "was at "
        )
        assert done.status == "completed"
        store.close()

    def test_a_frozen_driver_is_taken_over_after_its_ttl_and_its_late_result_refused(
        self, tmp_path: Path
    ) -> None:
        """SIGSTOPped inside its call (alive, its heartbeat stopped): refused while its 1 s
        lease lasts, taken over after; woken, its late result is not written."""
        import json
        import signal

        proc, go, store = _child(tmp_path, ttl=1.0)
        os.kill(proc.pid, signal.SIGSTOP)
        answer = ScriptedModel([lambda ctx: Decision.answer(ctx.results[0].status)])
        try:
            with pytest.raises(RunHeldError):
                runner_for(store, answer, [Gate().tool()]).drive("r1")
            done = runner_for(store, answer, [Gate().tool()]).drive("r1", wait=TOOL_WAIT)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert (done.status, done.final_output) == ("completed", "unknown")
        go.touch()
        proc.join(TOOL_WAIT)
        assert json.loads((tmp_path / "go.out").read_text()) == ["waiting_tool", True]
        assert "tool.completed" not in types(store, "r1")
        assert validate(store, ["r1"]).ok
        store.close()

    def test_across_hosts_only_the_heartbeat_counts(self, tmp_path: Path) -> None:
        """A holder on another host whose pid runs nowhere here: waited for until its lease
        lapses, not taken over at once."""
        from agentfsm.stores._process import Process

        store = SQLiteEventStore(tmp_path / "runs.db")
        rows = store._lease_rows()
        elsewhere = Process("elsewhere", 2**22 + 1, "boot/pid:[1]/1")
        assert rows.take("r1", "remote", elsewhere, 0.5) == (True, None)
        with pytest.raises(RunHeldError) as info:
            store.hold("r1")
        assert info.value.holder.id == "remote"
        lease = store.hold("r1", wait=TOOL_WAIT)
        assert lease.takeover is not None
        assert (lease.takeover.id, lease.takeover.host) == ("remote", "elsewhere")
        store.close()


class TestWorkersAndRunners:
    """A worker's claim is the run's lease: Runners and workers exclude each other."""

    def test_a_runner_is_refused_while_a_worker_drives_the_run(self, tmp_path: Path) -> None:
        """The worker hands its claim to its Runner (`lease=`): a Runner elsewhere is
        refused, naming the worker; the worker's drive is not refused by its own claim."""
        from agentfsm.runtime import Worker, submit
        from agentfsm.stores.leases import SQLiteLeases

        path = tmp_path / "runs.db"
        store, gate = SQLiteEventStore(path), Gate()
        submit(store, "r1", "mail ann")
        leases = SQLiteLeases(path)
        worker = Worker(runner_for(store, _mail_model(), [gate.tool()]), leases, worker_id="w1")
        done: list[Any] = []
        thread = threading.Thread(target=lambda: done.append(worker.run_once()))
        thread.start()
        assert gate.entered.wait(TOOL_WAIT)
        other = SQLiteEventStore(path)
        with pytest.raises(RunHeldError) as info:
            runner_for(other, _mail_model(), [gate.tool()]).drive("r1")
        assert info.value.holder.id == "w1"
        assert info.value.holder.pid == os.getpid()
        gate.go.set()
        thread.join(TOOL_WAIT)
        assert (done[0].status, done[0].superseded) == ("completed", False)
        for handle in (store, other, leases):
            handle.close()

    @pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
    def test_a_worker_taking_over_a_dead_workers_run_names_it(
        self, kind: str, tmp_path: Path, request: pytest.FixtureRequest
    ) -> None:
        """A worker's lease lapsed with its call in flight: the next worker's claim takes it
        over, and the unknown call's reason names the dead worker and its last heartbeat."""
        from agentfsm.runtime import Worker, submit
        from agentfsm.stores.leases import MemoryLeases, SQLiteLeases

        store: EventStore
        if kind == "memory":
            store = MemoryEventStore()
        elif kind == "sqlite":
            store = SQLiteEventStore(tmp_path / "runs.db")
        else:
            from agentfsm.stores.postgres import PostgresEventStore
            from agentfsm.stores.postgres_leases import PostgresLeases

            dsn = request.getfixturevalue("postgres_dsn")
            prefix = request.getfixturevalue("pg_prefix")
            store = PostgresEventStore(dsn, table_prefix=prefix, migrate=True)

        opened: list[Any] = []

        def leases() -> Any:
            if isinstance(store, MemoryEventStore):
                return MemoryLeases(store)
            made: Any = (
                SQLiteLeases(tmp_path / "runs.db")
                if isinstance(store, SQLiteEventStore)
                else PostgresLeases(dsn, table_prefix=prefix)
            )
            opened.append(made)
            return made

        submit(store, "r1", "mail ann")
        assert leases().claim("w-dead", 0.2) == "r1"
        _left_in_flight(store)
        # Read live or lapsed: on a loaded machine the 0.2 s may be over already.
        dead = store._lease_rows().read("r1")
        assert dead is not None
        assert dead.heartbeat is not None
        time.sleep(0.3)
        answer = ScriptedModel([lambda ctx: Decision.answer(ctx.results[0].status)])
        worker = Worker(runner_for(store, answer, [Gate().tool()]), leases(), worker_id="w2")
        done = worker.run_once()
        assert done is not None
        (unknown,) = done.unknown_outcomes
        assert unknown.reason == (
            "the worker stopped while attempt 1 was in flight (its lease was held by "
            f"'w-dead' (pid {os.getpid()} on {socket.gethostname()}), whose last heartbeat "
            f"was at {dead.heartbeat.isoformat()}); 'send_email' has side effects and is not "
            "idempotent, so it was not run again"
        )
        for handle in (*opened, store):
            handle.close()

    def test_a_worker_never_claims_a_run_a_runner_drives(self, tmp_path: Path) -> None:
        """While a Runner is inside a call of `r1`, a worker finds nothing to claim."""
        from agentfsm.runtime import Worker
        from agentfsm.stores.leases import SQLiteLeases

        path = tmp_path / "runs.db"
        gate = Gate()
        first = Driving(SQLiteEventStore(path), gate)
        leases = SQLiteLeases(path)
        other = SQLiteEventStore(path)
        worker = Worker(runner_for(other, _mail_model(), [gate.tool()]), leases, worker_id="w1")
        assert worker.run_once() is None
        assert first.finish().status == "completed"
        leases.close()
        other.close()


class TestAsync:
    """The AsyncRunner holds the lease as the Runner does, renewed by a task."""

    @pytest.fixture(params=["threaded-sqlite", "postgres"])
    def opener(self, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Any]:
        """Opens async handles on one store (each an awaitable of an `AsyncEventStore`)."""
        if request.param == "threaded-sqlite":
            from agentfsm.stores import ThreadedAsyncEventStore

            path = tmp_path / "runs.db"

            async def sqlite() -> Any:
                return ThreadedAsyncEventStore(SQLiteEventStore(path))

            return sqlite
        from agentfsm.stores.postgres import AsyncPostgresEventStore, PostgresEventStore

        dsn = request.getfixturevalue("postgres_dsn")
        prefix = request.getfixturevalue("pg_prefix")
        PostgresEventStore(dsn, table_prefix=prefix, migrate=True).close()

        async def postgres() -> Any:
            return await AsyncPostgresEventStore.connect(dsn, table_prefix=prefix)

        return postgres

    def test_a_second_async_driver_is_refused_and_a_long_call_keeps_the_lease(
        self, opener: Callable[[], Any]
    ) -> None:
        """A 0.3 s lease, a 1.2 s async call: a second `drive` is refused throughout, the
        run completes under its first driver."""
        import asyncio

        from agentfsm.runtime import Agent, AsyncRunner

        async def scenario() -> tuple[list[bool], RunResult]:
            first, second = await opener(), await opener()
            entered = asyncio.Event()

            async def send(ctx: ToolContext) -> Any:
                entered.set()
                await asyncio.sleep(1.2)
                return "sent"

            def agent() -> Agent:
                model = ScriptedModel(
                    [
                        Decision.call_tools(ProposedCall("send_email", {"to": "a"})),
                        Decision.answer("done"),
                    ],
                    by_turn=True,
                )
                return Agent("support", model, [Tool("send_email", send)])

            config = RunnerConfig(lease_ttl=0.3)
            driving = asyncio.create_task(AsyncRunner(first, agent(), config=config).run("r1"))
            await entered.wait()
            refused = []
            for _ in range(5):
                try:
                    await AsyncRunner(second, agent()).drive("r1")
                    refused.append(False)
                except RunHeldError:
                    refused.append(True)
                await asyncio.sleep(0.2)
            done = await driving
            await first.close()
            await second.close()
            return refused, done

        refused, done = asyncio.run(scenario())
        assert refused == [True] * 5
        assert (done.status, done.superseded) == ("completed", False)


class TestTheDrivesOwnLease:
    """How a drive takes, hands over and gives up its lease."""

    def test_a_drive_that_raises_gives_its_lease_up(self) -> None:
        """An exception out of a tool (the process's own crash) releases the lease on its
        way out: the run is resumed at once, not after the ttl."""
        from .helpers import Crash

        store = MemoryEventStore()

        def crash(ctx: ToolContext) -> Any:
            raise Crash

        model = ScriptedModel([Decision.call_tools(ProposedCall("charge")), Decision.answer("ok")])
        with pytest.raises(Crash):
            runner_for(store, model, [Tool("charge", crash, idempotent=True)]).run("r1")
        assert store.holder("r1") is None

    def test_a_run_driven_inside_its_own_drive_is_refused(self) -> None:
        """A tool that resumes its own run is a second driver of it, however near."""
        store = MemoryEventStore()
        refused: list[str] = []

        def again(ctx: ToolContext) -> Any:
            try:
                runner_for(store, _mail_model(), []).drive(ctx.run_id)
            except RunHeldError as exc:
                refused.append(exc.holder.id)
            return "tried"

        model = ScriptedModel([Decision.call_tools(ProposedCall("again")), Decision.answer("ok")])
        done = runner_for(store, model, [Tool("again", again)]).run("r1")
        assert done.status == "completed"
        assert len(refused) == 1
        assert refused[0].startswith("runner-")

    def test_a_lease_handed_over_must_be_the_runs_and_alone(self) -> None:
        """A lease of another run, or a lease and a wait together, are refused by name."""
        store = MemoryEventStore()
        submit(store, "r1")
        lease = store.hold("r2")
        runner = runner_for(store, _mail_model(), [])
        with pytest.raises(ValueError, match=r"^the lease given is of run 'r2', not of run 'r1'$"):
            runner.drive("r1", lease=lease)
        mine = store.hold("r1")
        with pytest.raises(
            ValueError, match=r"^give a held lease or a time to wait for one, not both$"
        ):
            runner.drive("r1", lease=mine, wait=1)
