"""The runtime's errors, under the one `AgentFSMError` base.

::

    AgentFSMError
    ├── RunSupersededError        another process drove the run while this one was driving it
    │   └── LeaseLostError        the driver's lease on the run expired or was taken over
    └── UnknownAgentError (LookupError)   a run names an agent the Runner was not given

(`RunHeldError`, a driver refused because another holds the run, is a store's answer: it is
in `agentfsm.errors`.)

Failures of tools and models are not errors of the Runner: they are recorded as events
(`tool.failed`, `tool.outcome_unknown`, `run.failed`) and the run goes on or ends by the table.
"""

from __future__ import annotations

from agentfsm.errors import AgentFSMError

__all__ = ["LeaseLostError", "RunSupersededError", "UnknownAgentError"]


class RunSupersededError(AgentFSMError):
    """Someone else appended driving events (model, tool, approval request) to this run.

    The Runner stops rather than fork the work; optimistic concurrency already kept the log
    whole. It is caught inside the Runner and reported as `RunResult.superseded`.

    Attributes:
        run_id: the run.
        sequence: the sequence of the other writer's event (None for a `LeaseLostError`).
        event: its type (None for a `LeaseLostError`).
    """

    sequence: int | None
    event: str | None

    def __init__(self, *, run_id: str, sequence: int, event: str) -> None:
        self.run_id = run_id
        self.sequence = sequence
        self.event = event
        super().__init__(
            f"run '{run_id}' is being driven by another process: it appended '{event}' "
            f"(sequence {sequence}); this runner stops"
        )


class UnknownAgentError(AgentFSMError, LookupError):
    """The run's current agent is not one the Runner knows.

    Attributes:
        run_id: the run.
        agent: the agent it names.
        known: the agents the Runner was given, sorted.
    """

    def __init__(self, *, run_id: str, agent: str, known: tuple[str, ...]) -> None:
        self.run_id = run_id
        self.agent = agent
        self.known = known
        names = ", ".join(f"'{n}'" for n in known) or "none"
        super().__init__(
            f"run '{run_id}' is with agent '{agent}', which this Runner lacks: {names}"
        )


class LeaseLostError(RunSupersededError):
    """A driver no longer holds the lease on the run it drives: it stops before writing.

    Its heartbeat was refused (another driver took the run over), or has not got through
    for the lease's ttl (a partition: another may take it over at any moment).

    As for any `RunSupersededError`, the Runner reports it as `RunResult.superseded`.

    Attributes:
        run_id: the run.
        worker_id: the lease's holder (a worker's id, or a drive's).
    """

    def __init__(self, *, run_id: str, worker_id: str) -> None:
        self.run_id = run_id
        self.worker_id = worker_id
        self.sequence = None
        self.event = None
        AgentFSMError.__init__(
            self, f"'{worker_id}' lost its lease on run '{run_id}' (it expired or was taken over)"
        )
