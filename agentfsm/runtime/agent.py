"""The parts a Runner is built from: agents, subagents, its settings, and what a run returns.

An `Agent` is a model with the tools it may call and the policy over them. A run starts with
one agent; a `handoff` decision switches to another (turns and budget carry on). A
`subagent(...)` tool runs a whole child run for one call: the child has its own turn count,
draws on the root run's token and cost budget, and its final output is the call's result.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import attrs
from pydantic import BaseModel, Field

from agentfsm.events.models import Limits, Usage
from agentfsm.guards.limits import DEFAULT_MAX_CALLS_PER_DECISION, DEFAULT_MAX_TURNS
from agentfsm.names import ActionStatus, RunStatus, StateKind
from agentfsm.runtime.model import Decision, ModelChunk, ModelContext
from agentfsm.runtime.policy import Policy, allow_all
from agentfsm.runtime.tools import Tool, ToolContext, ToolRegistry
from agentfsm.stores.lease import LEASE_TTL

if TYPE_CHECKING:
    from agentfsm.record import Action, RunRecord

__all__ = [
    "Agent",
    "ModelFn",
    "PendingApproval",
    "RunOutcome",
    "RunResult",
    "RunnerConfig",
    "Subagent",
    "SubagentArgs",
    "SubagentTool",
    "exponential_backoff",
    "subagent",
]

#: What a model returns: a decision, or chunks to assemble (sync or async), or an awaitable
#: of either (`AsyncRunner` only).
ModelReply = (
    Decision
    | Iterable[ModelChunk]
    | AsyncIterable[ModelChunk]
    | Awaitable[Decision | Iterable[ModelChunk] | AsyncIterable[ModelChunk]]
)
#: A model adapter: one call per turn.
ModelFn = Callable[[ModelContext], ModelReply]


def _registry(value: ToolRegistry | Iterable[Tool]) -> ToolRegistry:
    return value if isinstance(value, ToolRegistry) else ToolRegistry(value)


@attrs.frozen
class Agent:
    """A model, the tools it may call, and the policy over those calls.

    Attributes:
        name: the agent's name (`run.started.agent`, `handoff.to_agent`).
        model: called once per turn with a `ModelContext`.
        tools: a `ToolRegistry` or a list of tools.
        policy: allow / deny / needs_approval per call (everything allowed by default).
    """

    name: str
    model: ModelFn
    tools: ToolRegistry = attrs.field(factory=ToolRegistry, converter=_registry)
    policy: Policy = allow_all


class SubagentArgs(BaseModel):
    """The default arguments of a subagent tool: the task to hand over."""

    task: str = Field(min_length=1)


@attrs.frozen
class Subagent:
    """A child run behind a tool call (see `subagent`).

    Attributes:
        agent: the child's agent (its model, tools and policy).
        objective: turns the call's validated arguments into the child's objective.
        limits: the child's own limits (its turn count is its own); the root's token and
            cost limits apply to the whole tree regardless.
        agents: further agents the child may hand off to.
    """

    agent: Agent
    objective: Callable[[Any], str]
    limits: Limits | None = None
    agents: tuple[Agent, ...] = ()


@attrs.frozen
class SubagentTool(Tool):
    """A tool whose call runs a child run of an agent (made by `subagent(...)`).

    The Runner runs `subagent` for it and never calls `fn`. A subclass rather than a field
    of `Tool`, so a tool need not know what an agent is: agents hold tools, not the reverse.

    Attributes:
        subagent: the child run's agent, objective and limits.
    """

    subagent: Subagent = attrs.field(kw_only=True)


def _task(args: Any) -> str:
    return str(args.task)


def _not_called(ctx: ToolContext) -> Any:  # pragma: no cover - the Runner runs the child
    raise RuntimeError("a subagent tool is run by the Runner, not called")


def subagent(
    name: str,
    agent: Agent,
    *,
    args: type[BaseModel] = SubagentArgs,
    objective: Callable[[Any], str] = _task,
    limits: Limits | None = None,
    agents: Iterable[Agent] = (),
    description: str = "",
) -> SubagentTool:
    """A tool whose call runs a child run of `agent` and returns its final output.

    The child's run id is `<parent run>/<action id>`, so the call is idempotent: after a
    crash the same child run is driven on, never started twice.

    Args:
        name: the tool's name.
        agent: the child's agent.
        args: the call's argument model (`SubagentArgs`: one `task` string, by default).
        objective: the child's objective from the validated arguments.
        limits: the child's own limits (e.g. `Limits(max_turns=5)`).
        agents: agents the child may hand off to.
        description: for the model's tool list.
    """
    return SubagentTool(
        name,
        _not_called,
        args=args,
        side_effects=True,
        idempotent=True,
        description=description,
        subagent=Subagent(agent, objective, limits, tuple(agents)),
    )


def exponential_backoff(
    base: float = 0.5, factor: float = 2.0, cap: float = 30.0
) -> Callable[[int], float]:
    """Seconds to wait before retry `n` (1 for the first retry): base, base*factor, ... <= cap."""

    def delay(n: int) -> float:
        return float(min(cap, base * factor ** max(0, n - 1)))

    return delay


def _cap(instance: Any, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and (value.__class__ is not int or value < 1):
        raise ValueError(f"{attribute.name} must be an integer >= 1 or None, got {value!r}")


@attrs.frozen
class RunnerConfig:
    """How a Runner behaves where there is a choice.

    Attributes:
        wrap_up_turn: reserve the last turn `max_turns` allows for an answer without tools
            (the model's context says `wrap_up=True`); it counts within the limits. Off by
            default. If the model still calls tools then, the run stops for `max_turns`.
        cancel_grace: seconds to wait for calls in flight once a cancel is noticed, before
            recording them `outcome_unknown` (the `AsyncRunner`; sync calls finish anyway).
        cancel_poll: seconds between checks for a cancel while calls are in flight
            (`AsyncRunner`).
        backoff: seconds before retry `n` of a tool or model call.
        model_max_attempts: attempts per model call for retryable `ModelError`s.
        reserve: usage each model call reserves up front (`model.started.reserved_*`), so
            the budget guard refuses a call that could overspend. None (the default): under a
            budget, each call reserves the most tokens and cost one call of the run has used
            so far; `Usage()` reserves nothing. A call that overruns anyway is recorded and
            the run is stopped right after it (`run.terminated`, `budget`).
        accept: checks a final answer before the run completes: returns None to accept or
            a reason, which ends the run `failed` (kind `output_rejected`).
        max_conflicts: how many times in a row one append may lose a race (reload, re-check,
            append again) before the Runner gives up.
        max_calls_per_decision: the calls one model decision may propose (64 by default),
            written into the `limits` of each run the Runner starts unless the run's own
            `limits` set `max_calls_per_decision` (a number, or None to lift it for that
            run). A decision with more is recorded as `refused`: none of its calls run, the
            model's next turn sees why (`ModelContext.refusal`), and the run goes on. None
            lifts the cap for every run the Runner starts.
        max_turns: the turns (model calls) a run may take (100 by default), written into
            the `limits` of each run the Runner starts unless the run's own `limits` set
            `max_turns` (a number, or None to lift it for that run): a model that never
            gives a final answer stops there, `run.terminated` with `stop_reason`
            `max_turns`, instead of running until it is killed. None lifts the cap for
            every run the Runner starts (a run then ends only by its own limits, guards,
            or answer). A run it did not start keeps the caps its `run.started` wrote
            (`submit` writes the defaults).
        lease_ttl: seconds the run's lease lasts past its last heartbeat (renewed every
            third of it while the Runner drives, on its own clock): how long a run whose
            driver froze or was cut off waits before another may take it over. A driver
            whose process is gone on the same host is taken over at once.
    """

    wrap_up_turn: bool = False
    cancel_grace: float = 5.0
    cancel_poll: float = 0.5
    backoff: Callable[[int], float] = attrs.field(factory=exponential_backoff)
    model_max_attempts: int = 3
    reserve: Usage | None = None
    accept: Callable[[Any, RunRecord], str | None] | None = None
    max_conflicts: int = 20
    max_calls_per_decision: int | None = attrs.field(
        default=DEFAULT_MAX_CALLS_PER_DECISION, validator=_cap
    )
    max_turns: int | None = attrs.field(default=DEFAULT_MAX_TURNS, validator=_cap)
    lease_ttl: float = LEASE_TTL


_WAITING = frozenset({RunStatus.WAITING_APPROVAL, RunStatus.PAUSED})


@attrs.frozen
class PendingApproval:
    """A call waiting for a person's decision, as every run result lists it.

    The Runner's `RunResult` and an adapter's `ObservedRun` both list these, the run's own
    calls and its subagent runs' alike: decide one with
    `approve(store, p.run_id, p.action_id, digest=p.arguments_digest)`, which then approves
    exactly the call that was reviewed (or is refused if the call is not that one).

    Attributes:
        run_id: the run that asked for the decision, where it is taken (a subagent's run
            `<parent>/<action_id>` for a call of a subagent).
        action_id: the call.
        tool: the tool it calls.
        arguments: the arguments it calls it with.
        arguments_digest: the digest of tool and arguments that a decision is bound to
            (`Action.arguments_digest`).
    """

    run_id: str
    action_id: str
    tool: str
    arguments: Mapping[str, Any]
    arguments_digest: str

    @classmethod
    def of(cls, run_id: str, action: Action) -> PendingApproval:
        """The pending approval of `action`, a call of run `run_id`."""
        return cls(run_id, action.action_id, action.tool, action.arguments, action.arguments_digest)

    @classmethod
    def all_in(cls, record: RunRecord) -> tuple[PendingApproval, ...]:
        """The calls of `record`'s run that wait for a decision, in the ledger's order."""
        return tuple(cls.of(record.run_id, record.actions[a]) for a in record.pending_approvals)


class RunOutcome(Protocol):
    """What a driven run returns, whoever drove it.

    The Runner returns a `RunResult`, an SDK adapter an `ObservedRun`; code that reads how a
    run ended takes this, not either type.

    Each field means the same on both, except that the Runner's `final_output` keeps the
    model's last answer even when a guard stopped the run, where an adapter's is None
    unless it completed; `partial_output` is what the model last said when the run
    stopped before completing, on both.
    """

    @property
    def run_id(self) -> str:
        """The run."""

    @property
    def record(self) -> RunRecord:
        """The run's record when the call returned."""

    @property
    def status(self) -> str:
        """The run's status (`completed`, `waiting_approval`, `terminated`, ...)."""

    @property
    def stop_reason(self) -> str | None:
        """Why a guard stopped the run, if one did."""

    @property
    def final_output(self) -> Any:
        """The model's final answer."""

    @property
    def partial_output(self) -> Any:
        """What the model last said when the run stopped before completing, else None."""

    @property
    def waiting(self) -> bool:
        """The run waits for a person (approval) or something else (paused)."""

    @property
    def pending_approvals(self) -> tuple[PendingApproval, ...]:
        """The calls waiting for a person's decision: the run's own, then its subagent
        runs' (each decided in the run that asked for it)."""

    @property
    def unknown_outcomes(self) -> tuple[Action, ...]:
        """Calls whose effect nobody knows (crash, cancel, timeout): someone must look."""


@attrs.frozen
class RunResult:
    """Where a run stands when the Runner returns.

    The Runner returns when the run is terminal, waits for a person (`waiting_approval`,
    `paused`), or was taken over by another worker (`superseded`).

    Attributes:
        record: the run's record at that point.
        superseded: another process drove the run while this Runner was driving it; this
            one stopped (results it held were not recorded: the other records them as
            unknown).
        children: results of the subagent runs this call drove, by run id.
        wake_at: when the run must be driven again by itself, though it is runnable: a
            failed call's retry is due then (`drive(..., defer_retries=True)` returns at
            a backoff instead of sleeping; a driver keeps the time as a durable timer).
    """

    record: RunRecord
    superseded: bool = False
    children: Mapping[str, RunResult] = attrs.field(factory=dict)
    #: The kind of the run's state in its table (see `agentfsm.names.StateKind`).
    kind: StateKind | None = None
    wake_at: datetime | None = None

    @property
    def run_id(self) -> str:
        """The run."""
        return self.record.run_id

    @property
    def status(self) -> str:
        """The run's status (`completed`, `waiting_approval`, `terminated`, ...)."""
        return self.record.status

    @property
    def final_output(self) -> Any:
        """The model's last final answer (kept even when a guard stopped the run)."""
        return self.record.final_output

    @property
    def partial_output(self) -> Any:
        """The model's last answer when the run was stopped before its table ended it (a
        guard, a failure, a cancel), else None: what a user gets back at max turns or a
        budget stop, as from an adapter. Read from why the run stopped, not from a state's
        name: a lifecycle of your own that ends in `approved` has no partial output."""
        record = self.record
        if record.stop_reason is None and record.error is None and record.cancel_reason is None:
            return None
        return record.final_output

    @property
    def stop_reason(self) -> str | None:
        """Why a guard stopped the run, if one did."""
        return self.record.stop_reason

    @property
    def pending_approvals(self) -> tuple[PendingApproval, ...]:
        """The calls waiting for a person's decision: this run's own, then those of the
        subagent runs this call drove (`children`), deeper down, each in its own run."""
        own = PendingApproval.all_in(self.record)
        return own + tuple(p for child in self.children.values() for p in child.pending_approvals)

    @property
    def unknown_outcomes(self) -> tuple[Action, ...]:
        """Calls whose effect nobody knows (crash, cancel, timeout): someone must look."""
        return tuple(a for a in self.record.actions.values() if a.status == ActionStatus.UNKNOWN)

    @property
    def waiting(self) -> bool:
        """The run waits for a person or is paused (by its table's kinds: a state of your own
        declared `waiting` counts, not only `waiting_approval` and `paused`)."""
        if self.kind is not None:
            return self.kind in (StateKind.WAITING, StateKind.PAUSED)
        return self.record.status in _WAITING
