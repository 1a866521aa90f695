"""Workers on two "machines" (network namespaces), PostgreSQL reached over veth, one cut.

    sudo .venv/bin/python benchmarks/two_machines.py [--runs 1000] [--workers 2]
        [--cut-at 0.3] [--cut-for 8]      # TWO_MACHINES_HOLD=1.0: the after= timer's seconds

Two network namespaces, each behind a veth pair to the host (the host end 10.214.N.1, the
namespace end .2); a throwaway PostgreSQL (fsync off) on the host listens on both host
ends. In each namespace `--workers` processes of `agentfsm worker` (the operator's
command, default settings: heartbeat 1 s, stalled after 4 s) serve two queues, each run
routed to one of them at submission (`submit_routed`). From the host, `--runs` runs are
submitted; each:

- starts `held`: a state with a `Transition(after=--hold s)` to `running`, so every run
  has a durable timer that must fire exactly once (`hold.released` in its log);
- then calls `reserve` (idempotent: the backend honours its key; every fourth run needs
  a person's approval for it, given from the host with `approve()`), then `notify` (side
  effects, not idempotent: it must never run twice), then answers.

Every tool execution is appended to a side file (one line: tool, key, run, pid). Once
`--cut-at` of the runs have completed, machine 1's link is taken down (`ip link set down`
on the host end: packets dropped, no error seen) and brought up `--cut-for` seconds later,
when a tenth more runs (at least 10) are submitted, so the healed machine has work to take.
At the end it checks: every run completed and its log verifies; no `notify` ran twice for
a call, every `reserve` ran under its call's key; one `hold.released` per run. It prints
runs/s (overall, and per phase), the time from the cut to each run's next event when the
cut machine held its job (the take-over), the late appends refused after the heal, and
the jobs each machine ran after the heal.

Needs root (CAP_NET_ADMIN) and iproute2; `tests/runtime/test_two_machines.py` runs a small
version (40 runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agentfsm import DEFAULT_TABLE, State, Transition  # noqa: E402
from agentfsm.errors import LifecycleError  # noqa: E402
from agentfsm.events.models import parse_timestamp  # noqa: E402
from agentfsm.names import EventType, RunStatus, StateKind  # noqa: E402
from agentfsm.reducers import Reducer  # noqa: E402
from agentfsm.runtime import (  # noqa: E402
    ALLOW,
    Agent,
    Decision,
    ProposedCall,
    Runner,
    Tool,
    ToolContext,
    approve,
    needs_approval,
)
from agentfsm.runtime._wakeups import DRIVER_TYPES  # noqa: E402
from agentfsm.runtime.procrastinate import ProcrastinateEngine, Route, submit_routed  # noqa: E402
from agentfsm.stores import StoreOptions  # noqa: E402
from agentfsm.stores.base import EventStore  # noqa: E402
from agentfsm.stores.postgres import PostgresEventStore  # noqa: E402
from agentfsm.testing.fixtures.postgres_server import postgres_server  # noqa: E402

#: Seconds a run is held before it runs: its `after=` timer (the workers read it too).
HOLD = float(os.environ.get("TWO_MACHINES_HOLD", "1.0"))
#: Seconds each tool call takes, so that a cut lands in the middle of some.
TOOL_DELAY = float(os.environ.get("TWO_MACHINES_TOOL_DELAY", "0.05"))
#: The side file every tool execution is appended to (set by the harness for its workers).
SIDE_FILE = "TWO_MACHINES_SIDE_FILE"
QUEUES = ("orders-a", "orders-b")
ENDED = frozenset({"completed", "failed", "cancelled", "terminated"})

#: The default agent table, each run first `held` for `HOLD` seconds (a durable timer).
TABLE = DEFAULT_TABLE.derive(
    name="held_order",
    add_states=[State("held", kind=StateKind.WAITING, description="waits out its hold")],
    add_events=["hold.released"],
    remove=[(RunStatus.CREATED, EventType.RUN_STARTED, RunStatus.RUNNING)],
    add=[
        Transition(RunStatus.CREATED, EventType.RUN_STARTED, "held"),
        Transition("held", "hold.released", RunStatus.RUNNING, after=timedelta(seconds=HOLD)),
    ],
)


# -- the application the workers run ------------------------------------------------------


def _record(ctx: ToolContext) -> None:
    """One line per execution, appended in one write (O_APPEND: lines never interleave)."""
    line = f"{ctx.tool}\t{ctx.idempotency_key}\t{ctx.run_id}\t{os.getpid()}\n"
    fd = os.open(os.environ[SIDE_FILE], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _tool(ctx: ToolContext) -> Any:
    time.sleep(TOOL_DELAY)
    _record(ctx)
    return {"ok": True}


def _model(ctx: Any) -> Decision:
    if ctx.turn == 1:
        return Decision.call_tools(ProposedCall("reserve", {"item": ctx.run_id}))
    if ctx.turn == 2:
        return Decision.call_tools(ProposedCall("notify", {"to": f"{ctx.run_id}@example.com"}))
    return Decision.answer("done")


def _policy(action: Any, record: Any) -> Any:
    if action.tool == "reserve" and (record.objective or "").startswith("ask"):
        return needs_approval("a person signs the reservation off")
    return ALLOW


def make_runner(store: EventStore) -> Runner:
    """`agentfsm worker --runner benchmarks.two_machines:make_runner`."""
    tools = [Tool("reserve", _tool, idempotent=True), Tool("notify", _tool, side_effects=True)]
    return Runner(store, Agent("orders", _model, tools, _policy))


# -- the machines ---------------------------------------------------------------------------


def unavailable() -> str | None:
    """Why network namespaces cannot be made here (None: they can)."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    if os.geteuid() != 0:
        return "creating network namespaces needs root (CAP_NET_ADMIN)"
    probe = f"af2p{os.getpid() % 100000}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"the kernel refused a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], check=False, capture_output=True)
    return None


def _sh(*cmd: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {done.stderr.strip()}")


class Machine:
    """A network namespace behind a veth pair: the host end N.1, the namespace's N.2."""

    def __init__(self, index: int) -> None:
        tag = os.getpid() % 10000
        subnet = (tag % 60) * 4 + index
        self.index = index
        self.name = f"af2m{tag}{index}"
        self.host_if, self.ns_if = f"af2h{tag}{index}", f"af2n{tag}{index}"
        self.host_ip, self.ns_ip = f"10.214.{subnet}.1", f"10.214.{subnet}.2"
        self.net = f"10.214.{subnet}.0/30"
        self.made = False
        _sh("ip", "netns", "add", self.name)
        self.made = True
        _sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
        _sh("ip", "link", "set", self.ns_if, "netns", self.name)
        _sh("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_if)
        _sh("ip", "link", "set", self.host_if, "up")
        self._in("ip", "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_if)
        self._in("ip", "link", "set", self.ns_if, "up")
        self._in("ip", "link", "set", "lo", "up")

    def _in(self, *cmd: str) -> None:
        _sh("ip", "netns", "exec", self.name, *cmd)

    def cut(self) -> None:
        """The host end down: the machine's packets are dropped, nothing errors."""
        _sh("ip", "link", "set", self.host_if, "down")

    def heal(self) -> None:
        _sh("ip", "link", "set", self.host_if, "up")

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self.host_if], check=False, capture_output=True)
        if self.made:
            subprocess.run(["ip", "netns", "del", self.name], check=False, capture_output=True)


@dataclass
class Worker:
    """An `agentfsm worker` process in a machine, its JSON log lines in a file."""

    machine: Machine
    name: str
    proc: subprocess.Popen[bytes]
    log: Path
    ready: Path

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for line in self.log.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out


def _start_worker(
    machine: Machine, url: str, name: str, work: Path, concurrency: int, tool_delay: float
) -> Worker:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "PYTHONUNBUFFERED": "1",
        SIDE_FILE: str(work / "side.tsv"),
        "TWO_MACHINES_HOLD": str(HOLD),
        "TWO_MACHINES_TOOL_DELAY": str(tool_delay),
    }
    log, ready = work / f"{name}.log", work / f"{name}.ready"
    queues = [arg for q in QUEUES for arg in ("--queue", q)]
    cmd = [
        "ip", "netns", "exec", machine.name, sys.executable, "-m", "agentfsm", "worker",
        "--store", url, "--runner", "benchmarks.two_machines:make_runner",
        "--table", "benchmarks.two_machines:TABLE", *queues, "--name", name,
        "--concurrency", str(concurrency), "--ready-file", str(ready), "--log-level", "info",
    ]  # fmt: skip
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=out)
    return Worker(machine, name, proc, log, ready)


def _stop(workers: list[Worker], timeout: float = 30.0) -> dict[str, int | None]:
    """SIGTERM each worker (a drain), then SIGKILL whatever is left; the exit codes."""
    for w in workers:
        if w.proc.poll() is None:
            w.proc.send_signal(signal.SIGTERM)
    codes: dict[str, int | None] = {}
    deadline = time.monotonic() + timeout
    for w in workers:
        try:
            codes[w.name] = w.proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait()
            codes[w.name] = None
    return codes


# -- one trial ------------------------------------------------------------------------------


@dataclass
class Report:
    """What one trial measured and found (`problems` empty: every check passed)."""

    runs: int
    workers: int
    concurrency: int
    seconds: float = 0.0
    phases: dict[str, tuple[int, float]] = field(default_factory=dict)
    takeovers: list[float] = field(default_factory=list)
    #: Per run, its `after=` timer's event past its due time (s).
    lateness: list[float] = field(default_factory=list)
    #: (job id, run id, when) of each job the recovery pass moved.
    moved: list[tuple[int, str, float]] = field(default_factory=list)
    revived: int = 0
    moved_idle: int = 0
    late_refused: int = 0
    superseded_jobs: int = 0
    after_heal: dict[str, int] = field(default_factory=dict)
    approvals: int = 0
    submitted_after_heal: int = 0
    reserve_reruns: int = 0
    outcome_unknown: int = 0
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: The first submission, the cut and the heal (epoch seconds; None: not reached).
    marks: tuple[float, float | None, float | None] = (0.0, None, None)
    #: Per run, the times of its events appended after the cut.
    after_cut: dict[str, list[float]] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [
            f"{self.runs} runs ({self.submitted_after_heal} of them submitted at the heal; "
            f"every 4th approved from the host; each held {HOLD:g} s by an after= timer), "
            f"{self.workers} worker processes (concurrency {self.concurrency}) on each of 2 "
            "machines; PostgreSQL over veth, "
            "fsync off",
            f"all ended in {self.seconds:.1f} s: {self.runs / self.seconds:.1f} runs/s",
        ]
        for phase, (count, secs) in self.phases.items():
            rate = count / secs if secs > 0 else 0.0
            out.append(f"  {phase}: {count} runs completed in {secs:.1f} s ({rate:.1f} runs/s)")
        if self.lateness:
            late = sorted(self.lateness)
            out.append(
                f"after= timers: {len(late)} fired once each; late by median "
                f"{statistics.median(late):.2f} s, p95 {late[int(0.95 * (len(late) - 1))]:.2f} s, "
                f"max {late[-1]:.2f} s (all fall due within the submissions' time: they "
                "wait in the queue behind one another)"
            )
        if self.moved:
            cut = self.marks[1] or 0.0
            m = sorted(when - cut for _job, _run, when in self.moved)
            out.append(
                f"recovery pass (cut -> the cut machine's job moved, {len(m)} jobs): median "
                f"{statistics.median(m):.2f} s, max {m[-1]:.2f} s"
            )
        if self.takeovers:
            t = sorted(self.takeovers)
            out.append(
                f"take-over (cut -> the moved run's next driver event, elsewhere, {len(t)} "
                f"runs): median {statistics.median(t):.2f} s, max {t[-1]:.2f} s; "
                f"{self.moved_idle} moved job(s) found their run with nothing left to do"
            )
        out += [
            f"jobs moved by the recovery pass: {len(self.moved)}; late appends refused "
            f"after the heal: {self.late_refused}; attempts that stopped superseded: "
            f"{self.superseded_jobs}; closed attempts queued again by their stale worker's "
            f"retry (a duplicate wake-up): {self.revived}",
            "jobs run after the heal, per machine: "
            + ", ".join(f"{m} {n}" for m, n in sorted(self.after_heal.items())),
            f"approvals given: {self.approvals}; calls recorded outcome_unknown (not re-run): "
            f"{self.outcome_unknown}; reserve re-run under its key: {self.reserve_reruns}",
            f"worker exit codes after SIGTERM: {sorted(set(self.exit_codes.values()), key=str)}",
            "checks: " + ("all passed" if not self.problems else "; ".join(self.problems)),
        ]
        return out


@contextlib.contextmanager
def machines(count: int) -> Iterator[list[Machine]]:
    """`count` machines, removed on the way out whatever happens."""
    made: list[Machine] = []
    try:
        for i in range(1, count + 1):
            made.append(Machine(i))
        yield made
    finally:
        for m in made:
            m.remove()


def _approve_waiting(store: PostgresEventStore) -> int:
    done = 0
    for info in store.runs("waiting_approval"):
        for action in store.load(info.run_id).pending_approvals:
            with contextlib.suppress(LifecycleError):  # decided, or moved on, meanwhile
                approve(store, info.run_id, action, approver="host")
                done += 1
    return done


def trial(
    work: Path,
    *,
    runs: int = 1000,
    workers: int = 2,
    concurrency: int = 2,
    cut_at: float = 0.3,
    cut_for: float = 8.0,
    settle: float = 3.0,
    timeout: float = 300.0,
    tool_delay: float = TOOL_DELAY,
) -> Report:
    """One trial in the directory `work` (the side file and the workers' logs)."""
    report = Report(runs=runs, workers=workers, concurrency=concurrency)
    work.mkdir(parents=True, exist_ok=True)
    (work / "side.tsv").unlink(missing_ok=True)
    with machines(2) as (m1, m2):
        listen, trust = [m1.host_ip, m2.host_ip], [m1.net, m2.net]
        with postgres_server(listen=listen, trust=trust) as server:
            engine = ProcrastinateEngine(
                server.dsn, make_runner, options=StoreOptions(reducer=Reducer(TABLE))
            )
            engine.migrate()
            started: list[Worker] = []
            try:
                for m in (m1, m2):
                    url = f"postgresql://postgres@{m.host_ip}:{server.port}/postgres"
                    for j in range(workers):
                        name = f"m{m.index}-w{j}"
                        w = _start_worker(m, url, name, work, concurrency, tool_delay)
                        started.append(w)
                _wait_ready(started, 60)
                tail = max(10, runs // 10)
                _drive(engine, report, m1, started, runs, cut_at, cut_for, settle, timeout, tail)
            finally:
                report.exit_codes = _stop(started)
            _check(engine, report, work, started)
    return report


def _wait_ready(workers: list[Worker], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(w.ready.exists() for w in workers):
        for w in workers:
            if w.proc.poll() is not None:
                raise RuntimeError(f"worker {w.name} exited: {w.log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError("the workers did not get ready")
        time.sleep(0.05)


def _drive(
    engine: ProcrastinateEngine,
    report: Report,
    cut_machine: Machine,
    workers: list[Worker],
    runs: int,
    cut_at: float,
    cut_for: float,
    settle: float,
    timeout: float,
    after_heal: int,
) -> None:
    def submit(prefix: str, count: int) -> None:
        for i in range(count):
            objective = "ask first" if i % 4 == 0 else "go"
            route = Route(QUEUES[i % 2])
            submit_routed(store, f"{prefix}{i:05d}", objective, route=route)

    total = runs
    with engine.store() as store:
        t0 = time.time()
        submit("o", runs)
        cut_at_time = heal_at_time = None
        deadline = time.monotonic() + timeout
        try:
            while True:
                report.approvals += _approve_waiting(store)
                completed = len(store.runs("completed"))
                now = time.time()
                if cut_at_time is None and completed >= cut_at * runs:
                    cut_machine.cut()
                    cut_at_time = now = time.time()  # the link is down from here
                elif heal_at_time is None and cut_at_time and now - cut_at_time >= cut_for:
                    cut_machine.heal()
                    heal_at_time = now
                    # More work once healed: does the cut machine take jobs again?
                    submit("h", after_heal)
                    total += after_heal
                    report.submitted_after_heal = after_heal
                ended = sum(1 for i in store.runs() if i.status in ENDED)
                settled = heal_at_time is not None and now - heal_at_time >= settle
                if ended == total and (settled or cut_at_time is None):
                    break
                if time.monotonic() > deadline:
                    report.problems.append(f"only {ended} of {total} runs ended in {timeout} s")
                    break
                time.sleep(0.1)
        finally:
            if cut_at_time is not None and heal_at_time is None:
                cut_machine.heal()
                heal_at_time = time.time()
        report.marks = (t0, cut_at_time, heal_at_time)
        report.runs = total


def _check(engine: ProcrastinateEngine, report: Report, work: Path, workers: list[Worker]) -> None:
    t0, cut, heal = report.marks
    side: Counter[tuple[str, str]] = Counter()
    keys: dict[tuple[str, str], set[str]] = {}
    lines = (work / "side.tsv").read_text().splitlines() if (work / "side.tsv").exists() else []
    for line in lines:
        tool, key, run_id, _pid = line.split("\t")
        side[(tool, key)] += 1
        keys.setdefault((run_id, tool), set()).add(key)
    done_at: list[float] = []
    with PostgresEventStore(engine.conninfo, options=engine.options) as store:
        infos = {i.run_id: i for i in store.runs()}
        for run_id, info in infos.items():
            if info.status != "completed":
                report.problems.append(f"run {run_id} is {info.status}")
                continue
            events = list(store.events(run_id))
            types = [e.type for e in events]
            if types.count("hold.released") != 1:
                report.problems.append(f"run {run_id}: {types.count('hold.released')} releases")
            else:
                released = events[types.index("hold.released")]
                due = parse_timestamp(events[0].occurred_at) + timedelta(seconds=HOLD)
                report.lateness.append(
                    (parse_timestamp(released.occurred_at) - due).total_seconds()
                )
            report.outcome_unknown += types.count("tool.outcome_unknown")
            if not store.verify(run_id).ok:
                report.problems.append(f"run {run_id}'s log does not verify")
            done_at.append(parse_timestamp(events[-1].occurred_at).timestamp())
            if cut is not None:
                # A driver's own events only: the host's approvals are not a take-over.
                times = [
                    parse_timestamp(e.occurred_at).timestamp()
                    for e in events
                    if e.type in DRIVER_TYPES or e.type == "hold.released"
                ]
                report.after_cut[run_id] = [t for t in times if t > cut]
        for (tool, key), count in side.items():
            if tool == "notify" and count > 1:
                report.problems.append(f"notify ran {count} times under key {key}")
            if tool == "reserve" and count > 1:
                report.reserve_reruns += count - 1
        for (run_id, tool), found in keys.items():
            if len(found) != 1:
                report.problems.append(f"run {run_id}: {tool} ran under {len(found)} keys")
        if len(infos) != report.runs:
            report.problems.append(f"{len(infos)} runs in the store, {report.runs} submitted")
    report.seconds = max(done_at) - t0 if done_at else float("nan")
    if cut is not None:
        end = max(done_at)
        spans = {
            "before the cut": (t0, cut),
            "while cut": (cut, heal),
            "after the heal": (heal, end),
        }
        for phase, (a, b) in spans.items():
            report.phases[phase] = (sum(1 for t in done_at if a < t <= b), max(b - a, 0.0))
    _logs(report, workers, cut, heal)
    _takeovers(report, cut)


def _takeovers(report: Report, cut: float | None) -> None:
    """Per job the recovery pass moved: from the cut to its run's first driver event after
    the move (the run going on elsewhere)."""
    for _job, run_id, moved_at in report.moved:
        later = [t for t in report.after_cut.get(run_id) or [] if t > moved_at]
        if cut is not None and later:
            report.takeovers.append(min(later) - cut)
        else:
            report.moved_idle += 1  # its run had nothing left: the attempt was finishing


def _logs(report: Report, workers: list[Worker], cut: float | None, heal: float | None) -> None:
    """From the workers' JSON logs: the jobs the recovery pass moved, late appends refused
    and attempts stopped as superseded (on the cut machine, after the heal), closed
    attempts started again under their own id, and the jobs each machine ran after the
    heal."""
    starts: list[tuple[int, float]] = []
    for w in workers:
        machine = f"machine {w.machine.index}"
        report.after_heal.setdefault(machine, 0)
        for line in w.lines():
            event = line.get("event")
            at = line.get("timestamp")
            when = parse_timestamp(at).timestamp() if isinstance(at, str) else 0.0
            if event == "run.superseded":
                report.late_refused += 1
            elif event == "engine.superseded":
                report.superseded_jobs += 1
            elif event == "engine.job_recovered" and cut is not None:
                report.moved.append((int(line["job_id"]), str(line["run_id"]), when))
            elif event == "engine.advanced" and heal is not None and when > heal:
                report.after_heal[machine] += 1
            elif line.get("action") == "start_job" and isinstance(line.get("job"), dict):
                starts.append((int(line["job"]["id"]), when))
    closed = {job: when for job, _run, when in report.moved}
    report.revived = len({job for job, when in starts if job in closed and when > closed[job]})
    if heal is not None and report.after_heal.get("machine 1", 0) == 0:
        report.problems.append("the healed machine's workers ran no job after the heal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2, help="worker processes per machine")
    parser.add_argument("--concurrency", type=int, default=2, help="jobs per worker at once")
    parser.add_argument("--cut-at", type=float, default=0.3, help="share of runs done first")
    parser.add_argument("--cut-for", type=float, default=8.0, help="seconds the link is down")
    parser.add_argument("--work", type=Path, default=Path("/tmp/agentfsm-two-machines"))
    args = parser.parse_args()
    why = unavailable()
    if why is not None:
        raise SystemExit(f"two_machines: cannot run: {why}")
    report = trial(
        args.work,
        runs=args.runs,
        workers=args.workers,
        concurrency=args.concurrency,
        cut_at=args.cut_at,
        cut_for=args.cut_for,
    )
    print("\n".join(report.lines()))
    if report.problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
