"""`agentfsm jobs`: the Procrastinate engine's jobs, per run, and retrying or cancelling one.

Listed (most recent last, per run): `queued` (an advance or a due timer waiting for a
worker), `scheduled` (a timer not due yet, with its time), `running` (with its worker),
`stalled` (running on a worker silent for `--stalled-after` seconds: the recovery pass will
run it elsewhere) and `failed`. Finished jobs are not listed.

`--retry JOB` queues a fresh copy of a failed job (a new id, as the recovery pass does:
Procrastinate's own retry would give the failed attempt its id back, and a cut-off worker
still running it would pass its fence); refused while the run has a job running or queued,
which already drives it. `--cancel JOB` cancels a queued or scheduled job; refused for a
running one (stopping it mid-drive would leave its lease to lapse: cancel the run with
`agentfsm cancel` instead), and for a job of a run still going (the run would have nothing
to drive it). A refusal exits 1, naming why.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, load_table
from agentfsm.cli._output import shown
from agentfsm.cli._store import add_store_argument
from agentfsm.cli.control import command
from agentfsm.cli.worker import engine_modules, postgres_url
from agentfsm.fsm.default import DEFAULT_TABLE

__all__ = ["add_parser", "list_jobs"]

_LIST = """
SELECT j.id, j.args->>'run_id', j.task_name, j.status::text, j.queue_name, j.priority,
       j.attempts,
       j.scheduled_at, j.worker_id, w.last_heartbeat,
       (w.id IS NULL OR w.last_heartbeat < now() - make_interval(secs => %(stalled)s)),
       now(), j.args->>'kind'
  FROM procrastinate_jobs j
  LEFT JOIN procrastinate_workers w ON w.id = j.worker_id
 WHERE j.task_name = ANY(%(tasks)s) AND j.status IN ('todo', 'doing', 'failed')
   AND (%(run)s::text IS NULL OR j.args->>'run_id' = %(run)s)
 ORDER BY j.args->>'run_id', j.id
"""


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm jobs`."""
    p = command(
        subparsers, "jobs", "list the engine's jobs per run; retry or cancel one",
        "agentfsm jobs --store postgresql://db/agents --state failed\n"
        "  agentfsm jobs --store postgresql://db/agents --retry 42",
    )  # fmt: skip
    add_store_argument(p)
    p.add_argument("--run", type=_args.run_id, metavar="RUN_ID", help="only this run's jobs")
    p.add_argument(
        "--state", action="append",
        choices=("queued", "scheduled", "running", "stalled", "failed"),
        help="only jobs in this state (repeatable)",
    )  # fmt: skip
    p.add_argument(
        "--stalled-after", type=_args.seconds, default=4.0, metavar="S",
        help="a running job's worker silent this long is stalled (the engine's "
        "stalled_after; default 4)",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="one JSON object a line")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--retry", type=int, metavar="JOB", help="queue a failed job afresh")
    act.add_argument("--cancel", type=int, metavar="JOB", help="cancel a queued job")
    p.set_defaults(handler=_jobs)


def list_jobs(
    conn: Any, *, run: str | None = None, stalled_after: float = 4.0
) -> list[dict[str, Any]]:
    """The engine's unfinished and failed jobs, per run, each with its `state`."""
    pq = engine_modules("jobs")
    rows = conn.execute(
        _LIST, {"tasks": [pq.ADVANCE, pq.TIMER], "run": run, "stalled": stalled_after}
    ).fetchall()
    jobs = []
    for row in rows:
        job_id, run_id, task, status, queue, priority, attempts, at, worker, beat, silent = row[:11]
        now, kind = row[11:]
        state = _state(status, at, now, bool(silent))
        job: dict[str, Any] = {
            "job": job_id,
            "run": run_id,
            "task": "timer" if task == pq.TIMER else "advance",
            "state": state,
            "queue": queue,
            "priority": priority,
            "attempts": attempts,
        }
        if task == pq.TIMER:
            job["kind"] = kind or "wake"
        if at is not None:
            job["at"] = _iso(at)
        if status == "doing":
            job["worker"] = worker
            job["heartbeat"] = _iso(beat) if beat is not None else None
        jobs.append(job)
    return jobs


def _state(status: str, at: datetime | None, now: datetime, silent: bool) -> str:
    if status == "doing":
        return "stalled" if silent else "running"
    if status == "failed":
        return "failed"
    return "scheduled" if at is not None and at > now else "queued"


def _iso(at: datetime) -> str:
    return at.isoformat(timespec="seconds")


def _jobs(args: argparse.Namespace) -> int:
    url = postgres_url(args.store, "jobs")
    pq = engine_modules("jobs")
    import psycopg

    table = load_table(args.table, "jobs") or DEFAULT_TABLE
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            found = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
            if found is None or found[0] is None:
                raise UsageError(
                    f"{PROG} jobs: the database has no Procrastinate schema: "
                    f"run `{PROG} setup --store URL` once"
                )
            if args.retry is not None:
                return _retry(conn, pq, args.retry, args.stalled_after)
            if args.cancel is not None:
                return _cancel(conn, pq, args.cancel, table, args.stalled_after)
            jobs = list_jobs(conn, run=args.run, stalled_after=args.stalled_after)
    except psycopg.Error as exc:
        message = " ".join(str(exc).split())
        raise UsageError(f"{PROG} jobs: error: the store failed: {message}") from None
    if args.state:
        jobs = [j for j in jobs if j["state"] in args.state]
    _print(jobs, as_json=args.json)
    return 0


def _print(jobs: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
        for job in jobs:
            print(json.dumps(job, sort_keys=True))
        return
    if not jobs:
        print("no jobs")
        return
    run = None
    for job in jobs:
        if job["run"] != run:
            run = job["run"]
            print(f"run {shown(str(run))}")
        what = job["task"] + (f" ({job['kind']})" if "kind" in job else "")
        extra = ""
        if job["state"] == "scheduled":
            extra = f" at {job['at']}"
        elif job["state"] in ("running", "stalled"):
            extra = f" on worker {job['worker']} (heartbeat {job['heartbeat']})"
        priority = f" (priority {job['priority']})" if job["priority"] else ""
        print(
            f"  job {job['job']}: {what} {job['state']}{extra}, queue {shown(job['queue'])}"
            f"{priority}, attempts {job['attempts']}"
        )


def _job(conn: Any, pq: Any, job_id: int) -> tuple[Any, ...]:
    row = conn.execute(
        "SELECT id, task_name, args, lock, queueing_lock, status::text, queue_name, priority "
        "FROM procrastinate_jobs WHERE id = %s AND task_name = ANY(%s)",
        (job_id, [pq.ADVANCE, pq.TIMER]),
    ).fetchone()
    if row is None:
        raise UsageError(f"{PROG} jobs: no job {job_id} of the engine")
    return tuple(row)


def _refuse(message: str) -> int:
    print(f"{PROG} jobs: refused: {shown(message)}", file=sys.stderr)
    return 1


def _retry(conn: Any, pq: Any, job_id: int, stalled_after: float) -> int:
    with conn.transaction():
        # The run's jobs are looked at and the copy queued under the engine's lock on the
        # run, so two operators (or the recovery pass) do not both queue one.
        _, task, args, lock, queueing_lock, status, queue, priority = _job(conn, pq, job_id)
        run_id = args.get("run_id", "")
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"agentfsm:jobs:{run_id}",))
        if status != "failed":
            return _refuse(f"job {job_id} is {status}, not failed: nothing to retry")
        others = [
            j
            for j in list_jobs(conn, run=run_id, stalled_after=stalled_after)
            if j["job"] != job_id and j["state"] in ("running", "stalled", "queued")
            and j["task"] == "advance"
        ]  # fmt: skip
        if others:
            other = others[0]
            return _refuse(
                f"run '{run_id}' has job {other['job']} {other['state']}, which drives it already"
            )
        # The copy keeps the job's queue and priority: the run's route.
        route = pq.Route(queue, priority)
        pq.Waker(queue)._defer(
            conn, task, args, lock=lock, queueing_lock=queueing_lock, route=route
        )
        fresh = conn.execute(
            "SELECT max(id) FROM procrastinate_jobs WHERE args->>'run_id' = %s", (run_id,)
        ).fetchone()
    print(f"job {job_id} of run {shown(run_id)} queued afresh as job {fresh[0]}")
    return 0


def _cancel(conn: Any, pq: Any, job_id: int, table: Any, stalled_after: float) -> int:
    _, _task, args, _lock, _ql, status, _queue, _priority = _job(conn, pq, job_id)
    run_id = args.get("run_id", "")
    if status == "doing":
        return _refuse(
            f"job {job_id} is running: stopping it mid-drive would leave run '{run_id}' under "
            f"a lease nobody renews; cancel the run instead (`{PROG} cancel {run_id}`)"
        )
    if status != "todo":
        return _refuse(f"job {job_id} is {status}: only a queued job can be cancelled")
    state = conn.execute("SELECT status FROM agentfsm_runs WHERE run_id = %s", (run_id,)).fetchone()
    if state is not None and state[0] not in table.terminal_states:
        return _refuse(
            f"run '{run_id}' is still going ({state[0]}): without this job nothing may drive "
            f"it; cancel the run instead (`{PROG} cancel {run_id}`)"
        )
    done = conn.execute(
        "SELECT procrastinate_cancel_job_v1(%s, false, false)", (job_id,)
    ).fetchone()
    if done is None or done[0] is None:
        return _refuse(f"job {job_id} was taken meanwhile")
    print(f"job {job_id} of run {shown(run_id)} cancelled")
    return 0
