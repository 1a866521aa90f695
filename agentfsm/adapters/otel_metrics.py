"""OpenTelemetry metrics: what runs do (from their events) and how the engine keeps up.

`pip install 'agentfsm[otel]'`; inject a meter (`provider.get_meter("agentfsm")`): this
module never sets the global meter provider.

`RunMetrics(meter).feed(event)` counts from a run's events as they are stored (a listener,
like `RunSpans.feed`; the Procrastinate engine feeds it every event its jobs append):

| instrument                 | kind      | unit   | attributes                 |
|----------------------------|-----------|--------|----------------------------|
| `agentfsm.runs.started`    | counter   | {run}  |                            |
| `agentfsm.runs.ended`      | counter   | {run}  | `status` (completed, ...)  |
| `agentfsm.turns`           | counter   | {turn} |                            |
| `agentfsm.tool_calls`      | counter   | {call} | `tool`, `outcome`          |

`outcome` is `completed`, `failed` or `outcome_unknown` (the call was in flight when its
driver died and it was not safe to repeat). A subagent's run counts as a run.

`EngineMetrics(meter, conninfo)` is what `ProcrastinateEngine(metrics=...)` records:

| instrument                        | kind        | unit | attributes        |
|-----------------------------------|-------------|------|-------------------|
| `agentfsm.jobs.depth`             | gauge (obs) | {job} | `queue`, `state` |
| `agentfsm.jobs.oldest_age`        | gauge (obs) | s    | `queue`           |
| `agentfsm.wakeup.latency`         | histogram   | s    | `queue`           |
| `agentfsm.timer.lateness`         | histogram   | s    | `queue`, `kind`   |
| `agentfsm.lease.takeovers`        | counter     | {takeover} | `reason`    |

- depth: the engine's jobs by `state` (`queued`: due, waiting for a worker; `scheduled`:
  a timer not due yet; `running`; `failed`), read when the reader collects;
- oldest_age: how long the oldest due job has waited (0 when none waits);
- wakeup latency: from an advance job's queueing (the append that woke the run) to a worker
  starting it;
- timer lateness: from a timer's due time to a worker running it;
- lease takeovers: a drive that took over a lease whose holder went silent (`reason=lease`),
  and jobs the recovery pass moved off a silent worker (`reason=stalled_worker`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from agentfsm._extras import missing_extra

try:
    from opentelemetry.metrics import CallbackOptions, Meter, Observation
except ImportError as exc:
    raise missing_extra("RunMetrics", "otel", exc) from exc

from agentfsm.events import models as m
from agentfsm.events.models import Event
from agentfsm.record import RunRecord

__all__ = ["EngineMetrics", "RunMetrics"]

_ENDS = {
    m.RunCompleted: "completed",
    m.RunFailed: "failed",
    m.RunTerminated: "terminated",
    m.RunCancelled: "cancelled",
}
_OUTCOMES = {
    m.ToolCompleted: "completed",
    m.ToolFailed: "failed",
    m.ToolOutcomeUnknown: "outcome_unknown",
}
_KEPT_CALLS = 10_000  # calls requested and not ended whose tool is remembered


class RunMetrics:
    """Counts runs, turns and tool calls from events (see the module docstring).

    Args:
        meter: the meter to make the instruments with.
    """

    def __init__(self, meter: Meter) -> None:
        self.started = meter.create_counter(
            "agentfsm.runs.started", unit="{run}", description="runs started"
        )
        self.ended = meter.create_counter(
            "agentfsm.runs.ended", unit="{run}", description="runs ended, by status"
        )
        self.turns = meter.create_counter(
            "agentfsm.turns", unit="{turn}", description="model turns started"
        )
        self.tool_calls = meter.create_counter(
            "agentfsm.tool_calls", unit="{call}", description="tool calls ended, by outcome"
        )
        # (run, action) -> tool, from `tool.requested` until the call's outcome.
        self._tools: OrderedDict[tuple[str, str], str] = OrderedDict()

    def feed(self, event: Event, record: RunRecord | None = None) -> None:
        """Count one stored event (`record`: the run after it, if known, which names the
        tool of a call whose `tool.requested` this process did not see)."""
        kind = type(event)
        if kind is m.ModelStarted:
            self.turns.add(1)
        elif kind is m.ToolRequested:
            assert isinstance(event, m.ToolRequested)
            self._tools[(event.run_id, event.action_id)] = event.tool
            while len(self._tools) > _KEPT_CALLS:
                self._tools.popitem(last=False)
        elif kind in _OUTCOMES:
            action = getattr(event, "action_id", "")
            known = record.actions.get(action) if record is not None else None
            tool = self._tools.get((event.run_id, action)) or (known.tool if known else None)
            retried = isinstance(event, m.ToolFailed) and event.error.retryable
            if not retried:
                self._tools.pop((event.run_id, action), None)  # (a retry is the same call)
            self.tool_calls.add(1, {"tool": tool or "unknown", "outcome": _OUTCOMES[kind]})
        elif kind is m.RunStarted:
            self.started.add(1)
        elif kind in _ENDS:
            self.ended.add(1, {"status": _ENDS[kind]})

    def feed_all(self, events: Iterable[Event], record: RunRecord | None = None) -> None:
        """Count a batch of stored events (`record`: the run after the batch)."""
        for event in events:
            self.feed(event, record)


_DEPTH = """
SELECT queue_name,
       CASE WHEN status = 'doing' THEN 'running'
            WHEN status = 'failed' THEN 'failed'
            WHEN scheduled_at IS NOT NULL AND scheduled_at > now() THEN 'scheduled'
            ELSE 'queued' END,
       count(*)
  FROM procrastinate_jobs
 WHERE task_name LIKE 'agentfsm.%' AND status IN ('todo', 'doing', 'failed')
 GROUP BY 1, 2
"""

# A due job's wait starts at its due time (a timer) or its queueing (`deferred` event).
_OLDEST = """
SELECT j.queue_name,
       COALESCE(EXTRACT(EPOCH FROM now() - min(COALESCE(j.scheduled_at, e.at))), 0)
  FROM procrastinate_jobs j
  LEFT JOIN procrastinate_events e ON e.job_id = j.id AND e.type = 'deferred'
 WHERE j.task_name LIKE 'agentfsm.%' AND j.status = 'todo'
   AND (j.scheduled_at IS NULL OR j.scheduled_at <= now())
 GROUP BY 1
"""


class EngineMetrics:
    """The Procrastinate engine's instruments (see the module docstring), and its runs'.

    Args:
        meter: the meter to make the instruments with.
        conninfo: the engine's database, read for the queue gauges when collected.
    """

    def __init__(self, meter: Meter, conninfo: str) -> None:
        self.conninfo = conninfo
        self.runs = RunMetrics(meter)
        self.wakeup_latency = meter.create_histogram(
            "agentfsm.wakeup.latency", unit="s",
            description="from the append that woke a run to a worker starting its advance",
        )  # fmt: skip
        self.timer_lateness = meter.create_histogram(
            "agentfsm.timer.lateness", unit="s",
            description="from a timer's due time to a worker running it",
        )  # fmt: skip
        self.takeovers = meter.create_counter(
            "agentfsm.lease.takeovers", unit="{takeover}",
            description="drives that took a silent holder's run over",
        )  # fmt: skip
        meter.create_observable_gauge(
            "agentfsm.jobs.depth", callbacks=[self._depth], unit="{job}",
            description="the engine's jobs by state",
        )  # fmt: skip
        meter.create_observable_gauge(
            "agentfsm.jobs.oldest_age", callbacks=[self._oldest], unit="s",
            description="how long the oldest due job has waited for a worker",
        )  # fmt: skip

    def _rows(self, sql: str) -> list[Any]:
        import psycopg

        try:
            with psycopg.connect(self.conninfo, autocommit=True, connect_timeout=5) as conn:
                return conn.execute(sql).fetchall()
        except psycopg.Error:
            return []  # a gauge the database cannot answer is skipped, not an error

    def _depth(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(count, {"queue": queue, "state": state})
            for queue, state, count in self._rows(_DEPTH)
        ]

    def _oldest(self, _options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(max(float(age), 0.0), {"queue": queue})
            for queue, age in self._rows(_OLDEST)
        ]
