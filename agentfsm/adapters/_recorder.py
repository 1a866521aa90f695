"""`Recorder`: one SDK run's events appended to a store, checked, logged, and heard.

An adapter turns an SDK's signals (a hook call, a stream chunk, a graph node) into our events
and hands them to a `Recorder`, which appends them through the Runner's `Writer`: each batch
is checked against the table, the ledger and the guards before it is written, and logged
(`transition.applied` / `guard.rejected`). What can happen on an append:

- a guard refuses → `GuardStop` (the adapter stops the SDK run, then `terminate()` records
  `run.terminated` with the verdict) — except a guard refusing a model's tool calls (more
  than `max_calls_per_decision`): the decision is recorded as `refused` instead, and the
  SDK goes on; the adapter refuses each of those calls through the SDK's own tool or
  permission hooks (`refusal`), with the refusal's message as the error the model reads;
- another process asked to cancel the run and the event no longer applies → `CancelStop`
  (the adapter stops the SDK run, then `cancelled()` records `run.cancelled`);
- the SDK made a move the table refuses → the `LifecycleError`, re-raised with the SDK signal
  that caused it (`SignalIllegalTransitionError` for an `IllegalTransitionError`).

An SDK tool may propose an event of the run's own lifecycle while it runs (`propose`, which
each adapter's `SdkRun.emit` calls with the SDK's call id): checked at once, it rides on the
call's `tool.completed`, is judged once the batch is resolved (in the batch's order, in the
append of the outcome that resolved it: `agentfsm.runtime._emits`, as for the Runner), and
an event that makes the run wait (or ends it) stops the SDK at its next signal: `WaitStop`.
The adapter then keeps where the SDK stood (`keep_wait`); once a person's event makes the run
runnable again, its `adrive` continues the SDK from there (`kept_wait`). What the model has
not read yet goes into its next input (`notes`): a proposal the table refused when the batch
was resolved (after the tool had returned), and on such a drive the events appended while
the run waited.

From asyncio code (an SDK's async hooks, an async iteration) use `aappend` and `off_loop`:
the store is written in a worker thread, in the order the calls were made, so a slow store
does not stall the event loop the SDK's model calls and tools share.

An adapter's `run` or `drive` holds the run's lease for the whole call (`held`, `aheld`), as
every driver does: a second driver of the run is refused at once (`RunHeldError`), and this
process's heartbeat thread renews the lease while the SDK's tools run. A subagent's run is
driven inside its caller's call, under the caller's lease (it is of the same run tree, and
started in the caller's context: see `agentfsm.stores.lease`). A lost lease stops the
recording before its next write (`LeaseLostError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar

from agentfsm._log import get_logger
from agentfsm.adapters._pricing import Pricing
from agentfsm.adapters._sdk_stops import CancelStop, GuardStop, WaitStop
from agentfsm.adapters._storable import storable
from agentfsm.adapters._subagents import subagents, waits_for_person
from agentfsm.errors import (
    GuardRejectedError,
    IllegalTransitionError,
    LifecycleError,
    RunNotFoundError,
    RunSupersededError,
    SavedStateError,
    SignalIllegalTransitionError,
    UnknownModelError,
)
from agentfsm.events import models as m
from agentfsm.events.models import Event, Limits, ProposedEvent, Refusal
from agentfsm.guards.base import Guard, GuardContext, Verdict
from agentfsm.guards.limits import DEFAULT_MAX_CALLS_PER_DECISION, DEFAULT_MAX_TURNS, with_caps
from agentfsm.names import RESOLVED, ActionStatus, DecisionKind, EventType, RunStatus
from agentfsm.record import RunRecord
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import _emits
from agentfsm.runtime._calls import child_budget, new_tree
from agentfsm.runtime._metering import budgeted
from agentfsm.runtime._recovery import rebuild_tree
from agentfsm.runtime._writer import (
    BudgetTree,
    Spec,
    StateChanged,
    Writer,
    emit_refused,
    refused,
    terminated,
)
from agentfsm.runtime.tools import Emit
from agentfsm.stores.base import EventStore
from agentfsm.stores.lease import Lease, enclosing, new_holder

__all__ = ["Recorder", "RecorderOptions", "given_lease"]

#: The attachment (after the SDK's name) where an adapter keeps where the SDK stood when an
#: event of the run's lifecycle made it wait (`Recorder.keep_wait`).
_WAIT = "lifecycle_wait"

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: What may follow a saved SDK state: the decisions it waits for, or a cancel request.
_AFTER_A_PAUSE = frozenset(
    {EventType.APPROVAL_ACCEPTED, EventType.APPROVAL_REJECTED, EventType.RUN_CANCEL_REQUESTED}
)
#: What only a driver appends (the SDK's own steps): one after a kept wait means the SDK
#: went on from it, so continuing from it again would repeat what happened.
_DRIVEN = frozenset(
    {
        EventType.MODEL_STARTED,
        EventType.MODEL_COMPLETED,
        EventType.MODEL_FAILED,
        EventType.TOOL_REQUESTED,
        EventType.TOOL_STARTED,
        EventType.TOOL_COMPLETED,
        EventType.TOOL_FAILED,
        EventType.TOOL_OUTCOME_UNKNOWN,
        EventType.HANDOFF,
        EventType.APPROVAL_REQUESTED,
        EventType.USAGE_REPORTED,
    }
)
#: The envelope of an event, left out when the model is told what the event says.
_ENVELOPE = frozenset({"run_id", "sequence", "type", "occurred_at", "event_id", "emitted_by"})


def _utc_now() -> datetime:
    return datetime.now(UTC)


#: The lease a job engine already holds on the run it hands an adapter (`given_lease`).
_GIVEN: contextvars.ContextVar[Lease | None] = contextvars.ContextVar(
    "agentfsm_given_lease", default=None
)


@contextlib.contextmanager
def given_lease(lease: Lease | None) -> Iterator[None]:
    """In the block, an adapter's `run` or `drive` of `lease`'s run drives under `lease`,
    held already (a job's, `agentfsm.adapters.jobs`), instead of taking the run's lease
    itself (which the job's would refuse); it keeps it renewed while it drives and leaves
    releasing it to its owner. Its subagents' runs hold it as any caller's."""
    token = _GIVEN.set(lease)
    try:
        yield
    finally:
        _GIVEN.reset(token)


@dataclass(frozen=True)
class RecorderOptions:
    """How a run's events are checked, stamped, logged and heard; its subagents share them.

    Attributes:
        guards: Python guards (`MaxTurns(8)`, `Budget(...)`, `LoopDetector()`, ...).
        clock: stamps events and is the guards' `now` (UTC wall clock by default).
        logger: a structlog logger (by default `agentfsm._log.get_logger()`: see there).
        listeners: called with every event of the run once it is stored, in order (e.g.
            `RunSpans(tracer).feed` for live OpenTelemetry spans).
        reserve_tokens: tokens each model call reserves (`Recorder.model_call`).
        reserve_cost: cost each model call reserves.
        pricing: the cost of a model call from its tokens (`Recorder.usage`).
        max_calls_per_decision: the calls one model answer may propose, written into each
            run's `limits` unless they set it (see `with_caps`); None lifts it.
        max_turns: the model calls a run may make, written in the same way; None lifts it.
    """

    guards: Sequence[Guard] = ()
    clock: Callable[[], datetime] = _utc_now
    logger: Any = None
    listeners: Sequence[Callable[[Event], None]] = ()
    reserve_tokens: int | None = None
    reserve_cost: float | None = None
    pricing: Pricing | None = None
    max_calls_per_decision: int | None = DEFAULT_MAX_CALLS_PER_DECISION
    max_turns: int | None = DEFAULT_MAX_TURNS

    def __post_init__(self) -> None:
        for cap, what in (
            (self.max_calls_per_decision, "max_calls_per_decision"),
            (self.max_turns, "max_turns"),
        ):
            if cap is not None and (cap.__class__ is not int or cap < 1):
                raise ValueError(f"{what} must be an integer >= 1 or None, got {cap!r}")
        for value, what in (
            (self.reserve_tokens, "reserve_tokens"),
            (self.reserve_cost, "reserve_cost"),
        ):
            if value is not None and value < 0:
                raise ValueError(f"{what} must not be negative, got {value!r}")
        # Tuples: the options are shared by a run and its subagents, and must not change.
        object.__setattr__(self, "guards", tuple(self.guards))
        object.__setattr__(self, "listeners", tuple(self.listeners))


class Recorder:
    """Appends one SDK run's events to a store, checked and logged (see the module docstring).

    Args:
        store: any of our `EventStore`s.
        run_id: our id for the run.
        sdk: the SDK's name, used when naming the signal behind an illegal move.
        options: guards, clock, logger, listeners and model-call pricing (`RecorderOptions`).
        budget: the budget tree of a subagent tree this run belongs to (see `child`).
    """

    def __init__(
        self,
        store: EventStore,
        run_id: str,
        *,
        sdk: str,
        options: RecorderOptions | None = None,
        budget: BudgetTree | None = None,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.sdk = sdk
        self.options = options if options is not None else RecorderOptions()
        self.budget = budget
        #: The lease of the `run`/`drive` call recording now (see `held`).
        self._lease: Lease | None = None
        self._delivered = 0
        self._reducer = Reducer(
            store.reducer.table, self.options.guards, tables=store.reducer.tables
        )
        self._writer: Writer | None = None
        # Some SDKs call back from several threads at once (LangGraph's parallel tools).
        self._lock = threading.RLock()
        # Orders the writes asyncio code sends to worker threads (see `off_loop`); made
        # for the loop that first needs it, since an asyncio lock belongs to one loop.
        self._queue: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        #: What running calls proposed (`propose`), put on their outcome when it comes.
        self._proposals: dict[str, ProposedEvent | Refusal] = {}
        #: The state an event a call caused left the run in, where the SDK may not go on.
        self._waits = False
        #: Calls whose refused proposal went back to their tool (`propose`): it tells the
        #: model; and calls whose refusal the model was told of in its input (`notes`).
        self._returned: set[str] = set()
        self._told: set[str] = set()
        #: What happened while the run waited, for the model's first input after it (see
        #: `kept_wait`); told once a model call starts.
        self._since_wait: str | None = None

    @property
    def record(self) -> RunRecord:
        """The run's record as this recorder last saw it."""
        if self._writer is None:
            return self._reducer.initial(self.run_id)
        return self._writer.record

    def _open(self, record: RunRecord) -> Writer:
        self._writer = Writer(
            self.store,
            record,
            reducer=self._reducer,
            clock=self.options.clock,
            logger=self.options.logger,
            budget=self.budget,
        )
        # Appended to by a call that holds none (a caller ending its subagents' runs): under
        # the lease of the drive it is made in.
        self._writer.lease = self._lease if self._lease is not None else enclosing(self.run_id)
        return self._writer

    # -- the run's lease --------------------------------------------------------------------

    @contextlib.contextmanager
    def _under(self, lease: Lease | None) -> Iterator[None]:
        before, self._lease = self._lease, lease
        if self._writer is not None:
            self._writer.lease = lease
        try:
            yield
        finally:
            self._lease = before
            if self._writer is not None:
                self._writer.lease = before

    def _take(self) -> Lease | None:
        """The run's lease, taken for this recorder's call (within its caller's, for a
        subagent's run started from a call of its caller; the one a job holds for it,
        `given_lease`; None: the store keeps none)."""
        given = _GIVEN.get()
        if given is not None and given.run_id == self.run_id and not given.lost:
            return given
        try:
            return self.store.hold(self.run_id, holder=new_holder(self.sdk or "sdk"))
        except NotImplementedError:  # a store of someone else's, without leases
            return None

    @staticmethod
    def _let_go(lease: Lease) -> None:
        """Release `lease` once the call is done, unless a job holds it (`given_lease`)."""
        if lease is not _GIVEN.get():
            lease.release()

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the run's lease for the block (an adapter's `run` or `drive`), renewed by
        this process's heartbeat thread; a subagent's run is held with its caller's.

        Raises:
            RunHeldError: another driver holds the run.
        """
        lease = self._take()
        if lease is None:
            yield
            return
        try:
            with lease.kept(), self._under(lease):
                yield
        finally:
            self._let_go(lease)

    @contextlib.asynccontextmanager
    async def aheld(self) -> AsyncIterator[None]:
        """`held` for asyncio code: the lease taken and released off the loop."""
        lease = await self.off_loop(self._take)
        if lease is None:
            yield
            return
        try:
            with lease.kept(), self._under(lease):
                yield
        finally:
            await self.off_loop(self._let_go, lease)

    def child(self, action_id: str, sdk: str) -> Recorder:
        """The recorder of a subagent run started by this run's call `action_id`.

        Its id is `<run_id>/<action_id>` (the Runner's convention). When this run has token or
        cost limits, both runs draw on them through one budget tree: the child is refused for
        `budget` once the tree would overspend, and so is this run's next call.
        """
        writer = self._writer if self._writer is not None else self._open(self.record)
        with self._lock:
            child_id, tree = child_budget(writer, writer.record, action_id)
            self.budget = tree
        return self.like(child_id, sdk, tree)

    def like(self, run_id: str, sdk: str, budget: BudgetTree | None = None) -> Recorder:
        """A recorder of run `run_id` with this one's store, guards, clock and options."""
        return Recorder(self.store, run_id, sdk=sdk, options=self.options, budget=budget)

    def start(self, *, objective: str | None, agent: str | None, limits: Limits | None) -> None:
        """Append `run.started` for a new run."""
        self._open(self._reducer.initial(self.run_id))
        self.append(
            "run start",
            [
                Spec(
                    m.RunStarted,
                    {
                        "objective": objective,
                        "agent": agent,
                        # The log says the caps the run is under: any reader checks them.
                        "limits": with_caps(
                            limits,
                            max_turns=self.options.max_turns,
                            max_calls_per_decision=self.options.max_calls_per_decision,
                        ),
                        # The run is folded with this table from now on, by anyone.
                        "table": self._reducer.table.ref,
                    },
                )
            ],
        )

    def stored(self) -> bool:
        """Whether the store has the run (read from its index: nothing is replayed)."""
        try:
            self.store.run_info(self.run_id)
        except RunNotFoundError:
            return False
        return True

    def load_if_stored(self) -> bool:
        """Continue the run if the store has it (see `load`); False if it was never started."""
        if not self.stored():
            return False
        self.load()
        return True

    def load(self) -> RunRecord:
        """Continue a stored run (a drive): read its record from the store.

        A run with token or cost limits gets its budget tree back: the subagent runs it
        started before (in this process or another) count against its limits again.
        """
        record = self.store.load(self.run_id)
        if self.budget is None:
            self.budget = rebuild_tree(self.store, record, new_tree(record))
        self._open(record)
        self._delivered = record.version  # listeners hear what happens from here on
        self._waits = False  # a wait before is over once the run may be driven again
        return record

    def append(self, signal: str, specs: Sequence[Spec]) -> RunRecord:
        """Append a batch caused by the SDK's `signal`.

        Raises:
            GuardStop: a guard refused an event (nothing was written).
            CancelStop: the run was asked to cancel and the batch no longer applies.
            SignalIllegalTransitionError: the table refused the SDK's move.
            LifecycleError: the ledger refused it (with a note naming the signal).
        """
        with self._lock:
            record = self._append(signal, [storable(spec) for spec in specs])
            self._heard(specs)
            if self.options.listeners:
                self._deliver()
            return record

    async def aappend(self, signal: str, specs: Sequence[Spec]) -> RunRecord:
        """`append` for asyncio code: the store is written in a worker thread (see `off_loop`).

        Raises:
            The same as `append`.
        """
        return await self.off_loop(self.append, signal, specs)

    async def off_loop(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        """`fn(*args, **kwargs)`, a call of this recorder that reads or writes the store, in a
        worker thread, so a slow store does not stall the event loop.

        Calls made from one event loop run one at a time, in the order they were made: what
        a sync call would have written first is still written first. They take the
        recorder's lock in their thread, as any sync call does, so they do not interleave
        with an SDK's own threads either. Listeners then hear the events in that thread.

        A cancelled caller still waits for its call to end: the thread cannot be stopped,
        and a later write must not overtake one already under way. The cancel is raised
        once it has ended, as it would have been after a sync call.
        """
        async with self._ordered():
            # The worker gets a copy of the caller's context (`to_thread`): the adapters'
            # context variables and structlog's bound values hold there too.
            call = asyncio.ensure_future(asyncio.to_thread(fn, *args, **kwargs))
            try:
                return await asyncio.shield(call)
            except asyncio.CancelledError:
                await asyncio.wait([call])
                if not call.cancelled():
                    call.exception()  # seen: the caller hears the cancel, not this
                raise

    def _ordered(self) -> asyncio.Lock:
        """The lock that orders this loop's `off_loop` calls (an asyncio lock is one loop's:
        the sync `run` and `drive` each run a loop of their own)."""
        loop = asyncio.get_running_loop()
        if self._queue is None or self._queue[0] is not loop:
            self._queue = (loop, asyncio.Lock())
        return self._queue[1]

    def _deliver(self) -> None:
        # Read back from the store: a batch may have had other processes' events folded in.
        for event in self.store.events(self.run_id, after=self._delivered):
            for listener in self.options.listeners:
                listener(event)
            self._delivered = event.sequence

    def refusal(self, call_id: str) -> Refusal | None:
        """Why the SDK's call `call_id` must not run, when it belongs to a refused answer.

        A refused decision's calls never enter the ledger, yet the SDK holds them and will
        try to run them (or ask for their approval): a call the ledger does not know, once
        the latest decision was refused and before the next model call, is one of them.
        """
        record = self.record
        if record.model_call_open or call_id in record.actions:
            return None
        return record.last_refusal

    def propose(self, call_id: str, emit: Emit) -> Refusal | None:
        """Keep the event of the run's lifecycle the running call `call_id` proposes, for its
        outcome to carry; or why it cannot be one (recorded with the outcome, and returned
        now so the tool can tell the model in its own result). One per call.

        Raises:
            ValueError: `call_id` is not a call of this run that is running, or it proposed
                an event already.
        """
        with self._lock:
            record = self.record
            action = record.actions.get(call_id)
            if action is None or action.status not in _RUNNING:
                known = "not a call of" if action is None else f"'{action.status}' in"
                raise ValueError(
                    f"call '{call_id}' is {known} run '{self.run_id}': an event is proposed "
                    "by a call while it runs"
                )
            if call_id in self._proposals:
                raise ValueError(f"call '{call_id}' proposed an event already (one per call)")
            types = self._reducer.event_types_for(record)
            checked = _emits.check(emit, types, None)
            self._proposals[call_id] = checked
            if isinstance(checked, Refusal):
                self._returned.add(call_id)
                return checked
            return None

    def notes(self) -> list[str]:
        """What the model has not read yet, for its next input (one sentence each): first,
        on a drive that continues after a wait, the events appended while the run waited;
        then the events proposed by the latest batch's calls that the table refused once
        the batch was resolved (`refused_untold`).

        Told once a model call starts (its `model.started` is appended): an input the SDK
        built and never sent (a stop before the call) leaves them to the next one.
        """
        said = [] if self._since_wait is None else [self._since_wait]
        return [*said, *self.refused_untold().values()]

    def refused_untold(self) -> dict[str, str]:
        """The latest batch's calls whose proposed event the table refused once the batch was
        resolved (after their tools had returned, so no tool could say it), each with the
        sentence the model reads, until told (`told`, or a model call started)."""
        record = self.record
        untold: dict[str, str] = {}
        for aid in record.batch:
            action = record.actions[aid]
            if action.refusal is None or aid in self._returned or aid in self._told:
                continue
            proposed = action.emit.type if action.emit is not None else "an event"
            untold[aid] = (
                f"The event '{proposed}' that your call '{aid}' ({action.tool}) proposed was "
                f"refused: {action.refusal.message}."
            )
        return untold

    def told(self, call_id: str) -> None:
        """The model was told of call `call_id`'s refused proposal (with the call's result)."""
        self._told.add(call_id)

    def _heard(self, specs: Sequence[Spec]) -> None:
        """After an append: a model call started has its input, so it read the notes."""
        if any(spec.cls is m.ModelStarted for spec in specs):
            self._since_wait = None
            self._told.update(self.record.batch)

    def keep_wait(self, state: Any) -> bool:
        """Keep where the SDK stood (`state`, JSON data: its conversation, say) when an event
        of the run's lifecycle made it wait, bound to the run's version, for `kept_wait`.

        Returns False when the store keeps no attachments.
        """
        kept = {"waited_in": self.record.status, "state": state}
        return self.save_state(f"{self.sdk}/{_WAIT}", json.dumps(kept).encode())

    def kept_wait(self) -> Any:
        """Where the SDK stood when the run last waited in a state of its lifecycle (what
        `keep_wait` kept), or None if it kept none (the run never waited so, or the store
        keeps no attachments). What was appended since is noted for the model's next input
        (`notes`): the people's events, each with its fields, and where the run stands now.

        Raises:
            SavedStateError: the run went on since (a driver's step follows the wait).
        """
        name = f"{self.sdk}/{_WAIT}"
        try:
            kept = self.store.attachment(self.run_id, name)
        except NotImplementedError:
            return None
        if kept is None:
            return None
        said: list[str] = []
        for event in self.store.events(self.run_id, after=kept.version):
            if event.type in _DRIVEN:
                raise SavedStateError(
                    run_id=self.run_id,
                    name=name,
                    reason=f"it was kept at version {kept.version}, but the run went on "
                    f"since ('{event.type}' at sequence {event.sequence}): it is stale",
                )
            fields = event.model_dump(mode="json", exclude=set(_ENVELOPE), exclude_none=True)
            said.append(f"'{event.type}' {json.dumps(fields)}" if fields else f"'{event.type}'")
        data = json.loads(kept.data)
        self._since_wait = (
            f"While the run waited in '{data['waited_in']}', its lifecycle went on: "
            f"{'; '.join(said) or 'nothing'}. It is '{self.record.status}' now."
        )
        return data["state"]

    def forget_wait(self) -> None:
        """Drop what `keep_wait` kept (the SDK went on from it, or the run ended)."""
        self.forget_state(f"{self.sdk}/{_WAIT}")

    def _with_proposals(self, specs: Sequence[Spec]) -> list[Spec]:
        """`specs` with each proposal on its call's `tool.completed` (or refused with it); a
        call that did not succeed proposes nothing."""
        out: list[Spec] = []
        for spec in specs:
            out.append(spec)
            if spec.cls not in _OUTCOMES:
                continue
            aid = spec.fields["action_id"]
            proposal = self._proposals.pop(aid, None)
            if proposal is None or spec.cls is not m.ToolCompleted:
                continue
            if isinstance(proposal, ProposedEvent):
                proposal = _emits.beside(spec.fields.get("result"), proposal)
            if isinstance(proposal, Refusal):
                out.append(emit_refused(aid, proposal))
            else:
                out[-1] = Spec(m.ToolCompleted, {**spec.fields, "emit": proposal})
        return out

    def _judged(self, after: RunRecord, now: datetime) -> tuple[Spec, ...]:
        """The events the resolved batch's calls proposed, judged where the batch left the
        run (the ride-along of the outcome that resolved it, see `Writer.append`)."""
        if not after.pending_emits or not all(
            after.actions[a].status in RESOLVED for a in after.batch
        ):
            return ()
        try:
            judged, _ = _emits.judge(self._reducer, after, now.isoformat())
        except GuardRejectedError:
            return ()  # appended on its own, next: the guard's refusal stops the run then
        return judged

    def _waited(self, record: RunRecord) -> None:
        """After events calls caused: a run left where a Runner would return (it waits for a
        person, is paused, or ended) lets the SDK call nothing more (`WaitStop`)."""
        self._waits = self._reducer.table.stops_driving(record.status)

    def _append(self, signal: str, specs: Sequence[Spec]) -> RunRecord:
        writer = self._writer if self._writer is not None else self._open(self.record)
        writer.begin_step()
        if self._waits:
            raise WaitStop(writer.record)
        try:
            try:
                # Read the clock only when there is something to judge: an injected clock
                # steps on each reading.
                pending = writer.record.pending_emits
                leftover = self._judged(writer.record, writer.now()) if pending else ()
                if leftover:  # left by a crash, or a person's decision resolved the batch
                    self._waited(writer.append(leftover))
                    if self._waits:
                        raise WaitStop(writer.record)
                record = writer.append(self._with_proposals(specs), self._judged)
                if writer.rode:
                    self._waited(record)
                return record
            except GuardRejectedError as exc:
                instead = _refused_calls(specs, exc)
                if instead is None:
                    raise
                # The answer is kept as refused; the SDK goes on, and its calls are refused.
                return writer.append(instead)
        except GuardRejectedError as exc:
            raise GuardStop(exc) from exc
        except StateChanged as changed:
            if changed.record.status == RunStatus.CANCEL_REQUESTED:
                raise CancelStop(changed.record) from None
            raise
        except IllegalTransitionError as exc:
            if writer.record.status == RunStatus.CANCEL_REQUESTED:
                # Folded in by an earlier append: the SDK goes on, the run may not.
                raise CancelStop(writer.record) from None
            raise SignalIllegalTransitionError(exc, f"{self.sdk} {signal}") from exc
        except LifecycleError as exc:
            exc.add_note(f"caused by {self.sdk} {signal}")
            raise

    def report(self, signal: str, specs: Sequence[Spec]) -> RunRecord:
        """`append` of what the SDK reported it spent (`usage.reported`), also once an event
        of the run's lifecycle made it wait (`WaitStop` refuses the SDK's steps, and a report
        is none: the spending happened before the wait).

        Raises:
            The same as `append`.
        """
        with self._lock:
            waits, self._waits = self._waits, False
            try:
                return self.append(signal, specs)
            finally:
                self._waits = waits

    def waiting(self) -> RunRecord:
        """The run as it pauses with nothing of its own to record (it waits on a subagent).

        Raises:
            CancelStop: the run was asked to cancel meanwhile: it ends instead of waiting.
        """
        stored = self.store.load(self.run_id)
        if stored.status == RunStatus.CANCEL_REQUESTED:
            raise CancelStop(stored)
        return self.record

    def model_call(self) -> Spec:
        """The `model.started` of a model call, reserving its estimated usage.

        With a reservation the budget guard refuses a call that *could* overspend before
        the SDK makes it, instead of noticing the overspend after it was made.
        """
        return Spec(
            m.ModelStarted,
            {
                "reserved_tokens": self.options.reserve_tokens,
                "reserved_cost": self.options.reserve_cost,
            },
        )

    def usage(
        self, input_tokens: int | None, output_tokens: int | None, model: str | None = None
    ) -> dict[str, Any]:
        """A model call's `usage`: its tokens (0 when not reported), and its cost when the
        run has `pricing`. Prefer `reported_usage`, which says when there is none.

        Raises:
            UnknownModelError: as `reported_usage`.
        """
        return self._priced(input_tokens or 0, output_tokens or 0, model)

    def reported_usage(
        self, input_tokens: int | None, output_tokens: int | None, model: str | None = None
    ) -> dict[str, Any] | None:
        """A model call's `usage`: its tokens, and its cost when the run has `pricing`; None
        when the SDK reported no tokens (None, or 0 and 0: a real call reads its input).

        A `model.completed` without usage on a run under a budget stops the run
        (`agentfsm.runtime._metering`): its limit could not be checked.

        Raises:
            UnknownModelError: `pricing` has no price for `model`, and the run has a cost
                limit (its own or its tree's); without one the cost is left out, and logged.
        """
        if not input_tokens and not output_tokens:
            return None
        return self._priced(input_tokens or 0, output_tokens or 0, model)

    def _priced(self, tokens_in: int, tokens_out: int, model: str | None) -> dict[str, Any]:
        usage: dict[str, Any] = {"input_tokens": tokens_in, "output_tokens": tokens_out}
        if self.options.pricing is not None:
            try:
                usage["cost"] = self.options.pricing(model, tokens_in, tokens_out)
            except UnknownModelError as exc:
                if self._cost_limited():
                    exc.add_note(f"run '{self.run_id}' has a cost limit it could not check")
                    raise
                self._log().warning("usage.unpriced", run_id=self.run_id, model=model)
        return usage

    def _cost_limited(self) -> bool:
        """Whether the run has a cost limit: its own, or its tree's shared budget."""
        limits = self.record.limits
        if limits is not None and limits.max_cost is not None:
            return True
        return self.budget is not None and self.budget.current.max_cost is not None

    def budgeted(self) -> str | None:
        """What puts the run under a budget (see `agentfsm.runtime._metering.budgeted`)."""
        ctx = GuardContext(_utc_now(), budget=self.budget.current) if self.budget else None
        return budgeted(self.record, ctx, self.options.guards)

    def _log(self) -> Any:
        return self.options.logger if self.options.logger is not None else get_logger()

    def note(self, event: str, **fields: Any) -> None:
        """Log a line about what the adapter did on the user's behalf (structlog)."""
        self._log().info(event, run_id=self.run_id, sdk=self.sdk, **fields)

    def save_state(self, name: str, data: bytes) -> bool:
        """Keep the SDK's serialised state in the store, bound to the run's current version.

        Returns False when the store keeps no attachments (the caller keeps `.state`).
        """
        try:
            self.store.put_attachment(self.run_id, name, data, version=self.record.version)
        except NotImplementedError:
            return False
        return True

    def saved_state(self, name: str) -> bytes:
        """The SDK state kept under `name`, if the run has not moved on since it was saved.

        Only decisions (`approval.accepted` / `approval.rejected`) and a cancel request may
        follow it: anything else means the SDK went on from that state, and resuming from
        it again would repeat what already happened.

        Raises:
            SavedStateError: no state is kept, the store keeps none, or it is stale.
        """
        try:
            kept = self.store.attachment(self.run_id, name)
        except NotImplementedError as exc:
            raise SavedStateError(
                run_id=self.run_id, name=name, reason=f"{exc}; pass the state to drive"
            ) from None
        if kept is None:
            raise SavedStateError(
                run_id=self.run_id,
                name=name,
                reason="none is kept (the run never paused for approval here); "
                "pass the state to drive",
            )
        for event in self.store.events(self.run_id, after=kept.version):
            if event.type not in _AFTER_A_PAUSE:
                raise SavedStateError(
                    run_id=self.run_id,
                    name=name,
                    reason=f"it was saved at version {kept.version}, but the run went on "
                    f"since ('{event.type}' at sequence {event.sequence}): it is stale",
                )
        return kept.data

    def forget_state(self, name: str) -> None:
        """Drop the SDK state kept under `name` (the run ended: nothing will resume it)."""
        with contextlib.suppress(NotImplementedError):
            self.store.delete_attachment(self.run_id, name)

    def _end_subagents(self, why: str) -> None:
        """Cancel the subagent runs left waiting for a person below this run, which ends.

        Nothing else would end them: the call that waits on each is about to be settled.
        A subagent running in this process is left to its own run; one asked to cancel is
        ended too.
        """
        for child in subagents(self.store, self.record):
            asked = child.status == RunStatus.CANCEL_REQUESTED
            if not (asked or waits_for_person(self.store, child)):
                continue
            recorder = self.like(child.run_id, self.sdk)
            recorder.load()
            # It may have ended meanwhile, in another process: then it has its own ending.
            with contextlib.suppress(LifecycleError, GuardStop, CancelStop):
                if not asked:
                    cancel = Spec(
                        m.RunCancelRequested, {"reason": f"the run '{self.run_id}' {why}"}
                    )
                    recorder.append("the calling run ended", [cancel])
                recorder.cancelled()

    def terminate(self, stop: GuardStop) -> RunRecord:
        """Record `run.terminated` with the guard's verdict."""
        verdict = Verdict.of(stop.error)
        self._end_subagents(f"that called it was stopped ({verdict.stop_reason})")
        return self.append("stop", [terminated(stop.error)])

    def cancelled(self) -> RunRecord:
        """Record `run.cancelled` (calls left in flight are recorded as outcome unknown)."""
        self._end_subagents("that called it was cancelled")
        record = self.record
        specs: list[Spec] = [
            Spec(
                m.ToolOutcomeUnknown, {"action_id": a.action_id, "reason": "the run was cancelled"}
            )
            for a in record.actions.values()
            if a.status in ("requested", "started")
        ]
        specs.append(Spec(m.RunCancelled, {}))
        return self.append("cancel", specs)

    def stopped(self, stop: GuardStop | CancelStop) -> RunRecord:
        """Record how a stop ended the run: `run.terminated` or `run.cancelled`; nothing
        for a run an event of its own lifecycle made wait (`WaitStop`)."""
        if isinstance(stop, WaitStop):
            return self.record
        return self.terminate(stop) if isinstance(stop, GuardStop) else self.cancelled()

    def failed(self, exc: BaseException) -> None:
        """Record `run.failed` for what the SDK raised, unless the run cannot take it."""
        kind = "illegal_transition" if isinstance(exc, LifecycleError) else type(exc).__name__
        # Already ended (or never started), or the run is someone else's now (a lost
        # lease): the original error says what happened.
        with contextlib.suppress(LifecycleError, GuardStop, CancelStop, RunSupersededError):
            self.fail(kind, str(exc))

    def fail(self, kind: str, message: str) -> RunRecord:
        """Record `run.failed` with an error the SDK raised."""
        self._end_subagents("that called it failed")
        error = {"kind": kind, "message": message}
        return self.append("failure", [Spec(m.RunFailed, {"error": error})])


#: A call's outcomes: what a proposal of the call rides on, or is dropped with.
_OUTCOMES = frozenset({m.ToolCompleted, m.ToolFailed, m.ToolOutcomeUnknown})
#: The statuses of a call that may propose an event: proposed (an SDK may run a call before
#: its adapter hears of the start), or started.
_RUNNING = frozenset({ActionStatus.PROPOSED, ActionStatus.APPROVED, ActionStatus.STARTED})


def _refused_calls(specs: Sequence[Spec], error: GuardRejectedError) -> list[Spec] | None:
    """`specs` with the model's tool calls they record refused by `error`, or None.

    Only a `tool_calls` decision: the SDK then runs its calls (each refused by the adapter)
    and asks the model again, who reads why. A final answer or a handoff ends the SDK's
    turn without another model call to tell, so a guard refusing one stops the run.
    """
    for i, spec in enumerate(specs):
        if spec.cls is not m.ModelCompleted:
            continue
        if spec.fields.get("decision") != DecisionKind.TOOL_CALLS:
            return None
        instead = refused(spec, error)
        return None if instead is None else [*specs[:i], instead]
    return None
