"""`SdkRun`: what every SDK adapter's run object shares, and the options each one takes."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Self, TypedDict, TypeVar, cast, overload

from agentfsm.adapters._observed import ObservedRun, observed
from agentfsm.adapters._pricing import Pricing
from agentfsm.adapters._recorder import Recorder, RecorderOptions, _utc_now
from agentfsm.events.models import Event, Refusal
from agentfsm.guards.base import Guard
from agentfsm.guards.limits import DEFAULT_MAX_CALLS_PER_DECISION, DEFAULT_MAX_TURNS
from agentfsm.names import RunStatus
from agentfsm.record import RunRecord
from agentfsm.runtime.tools import Emit
from agentfsm.stores.base import EventStore

__all__ = ["RunOptions", "SdkRun", "aleased", "leased"]

_R = TypeVar("_R", bound="SdkRun")
#: An adapter's `run` or `drive` (its signature kept as it is by the decorators).
_F = TypeVar("_F", bound=Callable[..., Any])


def leased(method: _F) -> _F:
    """An adapter's `run`/`drive`, holding the run's lease for the call (`Recorder.held`)."""

    @functools.wraps(method)
    def drive(self: SdkRun, *args: Any, **kwargs: Any) -> Any:
        with self.recorder.held():
            return method(self, *args, **kwargs)

    return cast("_F", drive)


def aleased(method: _F) -> _F:
    """`leased` for an async `run`/`drive` (`Recorder.aheld`)."""

    @functools.wraps(method)
    async def drive(self: SdkRun, *args: Any, **kwargs: Any) -> Any:
        async with self.recorder.aheld():
            return await method(self, *args, **kwargs)

    return cast("_F", drive)


class RunOptions(TypedDict, total=False):
    """The options every adapter's run takes, for adapters that add their own (see `SdkRun`)."""

    guards: Sequence[Guard]
    clock: Callable[[], datetime]
    logger: Any
    listeners: Sequence[Callable[[Event], None]]
    reserve_tokens: int | None
    reserve_cost: float | None
    pricing: Pricing | None
    max_calls_per_decision: int | None
    max_turns: int | None


class SdkRun:
    """What every SDK adapter's run object shares: a `Recorder` built from the same options.

    Subclasses name their SDK (`sdk`, used in errors and logs) and wire their SDK-facing part
    in `_attach`. Every adapter takes the same options:

    Args:
        store: any of our `EventStore`s (memory, SQLite, PostgreSQL).
        run_id: our id for the run.
        guards: Python guards checked on every SDK signal (`MaxTurns`, `LoopDetector`, ...);
            the run's own `limits` apply too.
        clock: stamps events and is the guards' `now` (UTC wall clock by default).
        logger: a structlog logger for the transition log lines.
        listeners: called with each stored event, in order (`RunSpans(tracer).feed`).
        reserve_tokens: tokens each model call reserves before it is made (its estimate),
            so a token limit refuses a call that could overspend it.
        reserve_cost: the same for cost.
        pricing: `pricing(model, input_tokens, output_tokens)` -> the cost of a model call;
            the SDKs report only tokens, so without it a `max_cost` limit cannot trip.
        max_calls_per_decision: the calls one model answer may propose (64 by default),
            written into the run's `limits` unless they set it (a number, or None to lift
            it for the run; None here lifts it for every run). An answer with more is
            recorded as `refused`: the adapter refuses each of its calls through the SDK's
            tool or permission hooks, with the refusal's message as the error the model
            reads, nothing waits for approval, and the run goes on with the model's next
            answer.
        max_turns: the model calls a run may make (100 by default, as the Runner's), written
            into the run's `limits` the same way: the SDK's own turn limit may be none
            (recent LangGraph versions default to 10,007 super-steps, the Claude Agent SDK
            sets none), and a model that never answers must not run until it is killed. A
            run past it is `run.terminated` (`max_turns`). Raise it with the SDK's own
            limit, if you raise that above 100.
    """

    sdk: str = ""

    def __init__(
        self,
        store: EventStore,
        run_id: str,
        *,
        guards: Sequence[Guard] = (),
        clock: Callable[[], datetime] = _utc_now,
        logger: Any = None,
        listeners: Sequence[Callable[[Event], None]] = (),
        reserve_tokens: int | None = None,
        reserve_cost: float | None = None,
        pricing: Pricing | None = None,
        max_calls_per_decision: int | None = DEFAULT_MAX_CALLS_PER_DECISION,
        max_turns: int | None = DEFAULT_MAX_TURNS,
    ) -> None:
        options = RecorderOptions(
            guards=guards,
            clock=clock,
            logger=logger,
            listeners=listeners,
            reserve_tokens=reserve_tokens,
            reserve_cost=reserve_cost,
            pricing=pricing,
            max_calls_per_decision=max_calls_per_decision,
            max_turns=max_turns,
        )
        self.recorder = Recorder(store, run_id, sdk=self.sdk, options=options)
        self._attach()

    @classmethod
    def _over(cls, recorder: Recorder) -> Self:
        run = cls.__new__(cls)
        run.recorder = recorder
        run._attach()
        return run

    @property
    def run_id(self) -> str:
        """Our id for the run."""
        return self.recorder.run_id

    def emit(self, call_id: str, event: Emit) -> Refusal | None:
        """Propose `event`, one of the run's own lifecycle, from the SDK's tool call `call_id`
        while it runs (the SDK's call id, from the context it gives the tool).

        The table decides, as under the Runner: the proposal rides on the call's
        `tool.completed`, the event is judged once the batch is resolved (in its order) and
        appended with the outcome that resolved it, or recorded `emit.refused`. An event that
        makes the run wait for a person (or ends it) stops the SDK run before its next model
        call, and the adapter returns the run waiting there. What cannot be proposed at all
        (a type the table does not have, fields its type refuses) is refused with the
        call's outcome, and returned here, so the tool can tell the model in its result.

        Raises:
            ValueError: `call_id` is not a call of this run that is running, or it proposed
                an event already (one per call).
        """
        return self.recorder.propose(call_id, event)

    @overload
    def subagent(self, action_id: str) -> Self: ...

    @overload
    def subagent(self, action_id: str, adapter: type[_R]) -> _R: ...

    def subagent(self, action_id: str, adapter: type[SdkRun] | None = None) -> SdkRun:
        """The run of a subagent that this run's tool call `action_id` starts.

        Call it inside the tool: the child is a run of its own (`<run_id>/<action_id>`, in
        the same store, with the same guards, clock, logger and listeners) and draws on this
        run's token and cost limits through one shared budget (`SharedBudget`): a child that
        would overspend the tree is stopped for `budget`, and so is this run's next call.

        Args:
            action_id: the tool call's id (the SDK's call id).
            adapter: the adapter class driving the child (default: this run's).
        """
        cls = adapter if adapter is not None else type(self)
        return cls._over(self.recorder.child(action_id, cls.sdk))

    def _settle_without_driving(self, record: RunRecord, state: str | None) -> ObservedRun | None:
        """What `drive` returns when there is nothing to drive; None when there is.

        A run that already ended is returned as it is, like `Runner.drive` does: driving
        it again is not an error, and nothing runs. A run asked to cancel while it waited is
        ended here: nothing drove it when the cancel came (it waited for a decision, or on
        a subagent that did), so the drive settles it: `run.cancelled`, a call it waited on
        outcome unknown, and the subagents still waiting cancelled first.
        """
        if record.status in self.recorder.store.reducer.table.terminal_states:
            final = record.final_output if record.status == RunStatus.COMPLETED else None
            return observed(self.recorder.store, record, final_output=final)
        if record.status != RunStatus.CANCEL_REQUESTED:
            return None
        done = self.recorder.cancelled()
        if state is not None:
            self.recorder.forget_state(state)
        return observed(self.recorder.store, done)

    def _attach(self) -> None:
        """Build the SDK-facing part (hooks, callback handler) around `self.recorder`."""
