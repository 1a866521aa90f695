"""What every SDK adapter shares: one run's recorder over a store, and the result it returns.

An adapter turns an SDK's signals (a hook call, a stream chunk, a graph node) into our events
and hands them to a `Recorder`, which appends them through the Runner's `Writer`: each batch
is checked against the table, the ledger and the guards before it is written, and logged
(`transition.applied` / `guard.rejected`). What can happen on an append:

- a guard refuses → `GuardStop` (the adapter stops the SDK run, then `terminate()` records
  `run.terminated` with the verdict);
- another process asked to cancel the run and the event no longer applies → `CancelStop`
  (the adapter stops the SDK run, then `cancelled()` records `run.cancelled`);
- the SDK made a move the table refuses → the `LifecycleError`, re-raised with the SDK signal
  that caused it (`SignalIllegalTransitionError` for an `IllegalTransitionError`).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Self, TypedDict, TypeVar, overload

from agentfsm._log import get_logger
from agentfsm.errors import (
    AgentFSMError,
    GuardRejectedError,
    IllegalTransitionError,
    LifecycleError,
    RunNotFoundError,
)
from agentfsm.events import models as m
from agentfsm.events.bounds import unstorable
from agentfsm.events.models import Event, Limits
from agentfsm.guards.base import Guard, Verdict
from agentfsm.names import ActionStatus, EventType, RunStatus
from agentfsm.record import Action, RunRecord, call_digest
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime.recovery import rebuild_tree
from agentfsm.runtime.runner import child_budget, new_tree
from agentfsm.runtime.writer import BudgetTree, Spec, StateChanged, Writer
from agentfsm.stores.base import EventStore

__all__ = [
    "ApprovalMismatchError",
    "CancelStop",
    "GuardStop",
    "ObservedRun",
    "Pricing",
    "Recorder",
    "RunOptions",
    "SavedStateError",
    "SignalIllegalTransitionError",
    "jsonable",
    "parse_arguments",
    "per_million_tokens",
]


_R = TypeVar("_R", bound="SdkRun")

#: The cost of one model call: `pricing(model, input_tokens, output_tokens)`; `model` is the
#: model's name when the SDK reports one, else None.
Pricing = Callable[[str | None, int, int], float]
#: What may follow a saved SDK state: the decisions it waits for, or a cancel request.
_AFTER_A_PAUSE = frozenset(
    {EventType.APPROVAL_ACCEPTED, EventType.APPROVAL_REJECTED, EventType.RUN_CANCEL_REQUESTED}
)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class SignalIllegalTransitionError(IllegalTransitionError):
    """An `IllegalTransitionError` caused by an SDK signal, which its message names.

    Attributes:
        signal: the SDK signal, e.g. `openai-agents RunHooks.on_tool_start (call 'c1')`.
    """

    def __init__(self, error: IllegalTransitionError, signal: str) -> None:
        self.signal = signal
        super().__init__(
            run_id=error.run_id,
            sequence=error.sequence,
            state=error.state,
            event=error.event,
            allowed=error.allowed,
            terminal=error.terminal,
            failed_conditions=error.failed_conditions,
        )

    def _render(self) -> str:
        return f"{super()._render()} (caused by {self.signal})"


class ApprovalMismatchError(AgentFSMError):
    """The SDK state's call is not the one our store holds a decision for: nothing ran.

    Attributes:
        run_id: our run.
        action_id: the SDK's call id.
        expected: the digest of the call as approval was requested (None: no such call).
        actual: the digest of the call in the SDK state.
    """

    def __init__(self, *, run_id: str, action_id: str, expected: str | None, actual: str) -> None:
        self.run_id = run_id
        self.action_id = action_id
        self.expected = expected
        self.actual = actual
        why = (
            "no approval was requested for it"
            if expected is None
            else f"approval was requested for {expected}"
        )
        super().__init__(
            f"run '{run_id}': the SDK state's call '{action_id}' is {actual}, but {why}; "
            "refusing to resume"
        )


class SavedStateError(AgentFSMError):
    """The SDK state kept in our store cannot resume the run: nothing ran.

    Attributes:
        run_id: our run.
        name: the attachment the state is kept under (e.g. `openai-agents/run_state`).
        reason: what is wrong with it.
    """

    def __init__(self, *, run_id: str, name: str, reason: str) -> None:
        self.run_id = run_id
        self.name = name
        self.reason = reason
        super().__init__(f"run '{run_id}': cannot resume from the saved state '{name}': {reason}")

    @classmethod
    def unreadable(cls, run_id: str, name: str, exc: BaseException) -> SavedStateError:
        """The kept state does not load (corrupt, or another agent's): `exc` says why."""
        reason = f"it does not load: {type(exc).__name__}: {exc}"
        return cls(run_id=run_id, name=name, reason=reason)


class GuardStop(Exception):  # noqa: N818  (a stop signal, carried through the SDK)
    """A guard refused an event: the SDK run must stop and the run be terminated."""

    def __init__(self, error: GuardRejectedError) -> None:
        super().__init__(str(error))
        self.error = error


class CancelStop(Exception):  # noqa: N818  (a stop signal, carried through the SDK)
    """Another process asked to cancel the run: the SDK run must stop starting work."""

    def __init__(self, record: RunRecord) -> None:
        super().__init__(f"run '{record.run_id}' was asked to cancel")
        self.record = record


@dataclass
class ObservedRun:
    """How an SDK run observed through an adapter ended (or paused); a `RunOutcome`.

    Attributes:
        run_id: our run id.
        record: the run's record after the last event appended.
        final_output: the SDK's final output (None unless `status == "completed"`).
        partial_output: the last thing the model said (or a tool returned) when the run
            stopped early: what a user gets back at max turns or a budget stop.
        items: the SDK's own items produced by this leg (also on a stop, when it has them).
        sdk_result: the SDK's own result object, when it returned one.
        state: the SDK's serialised state to resume from (pending approvals), if any.
        pending_approvals: the calls the run waits on a decision for, as `(run_id,
            action_id)`: its own, and its subagents' (`agent_tool`, `delegate`), which are
            decided in the subagent's run.
    """

    run_id: str
    record: RunRecord
    final_output: Any = None
    partial_output: Any = None
    items: list[Any] = field(default_factory=list)
    sdk_result: Any = None
    state: Any = None
    pending_approvals: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.pending_approvals:  # the run's own; an adapter adds its subagents'
            self.pending_approvals = [(self.run_id, a) for a in self.record.pending_approvals]

    @property
    def status(self) -> str:
        """The run's status (`completed`, `waiting_approval`, `terminated`, ...)."""
        return self.record.status

    @property
    def stop_reason(self) -> str | None:
        """Why a guard stopped the run (`max_turns`, `budget`, ...), else None."""
        return self.record.stop_reason

    @property
    def waiting(self) -> bool:
        """The run waits for a person (approval) or something else (paused)."""
        return self.record.status in WAITING_FOR_PERSON

    @property
    def unknown_outcomes(self) -> tuple[Action, ...]:
        """Calls whose effect nobody knows (crash, cancel, timeout): someone must look."""
        return tuple(a for a in self.record.actions.values() if a.status == ActionStatus.UNKNOWN)


def per_million_tokens(input: float, output: float) -> Pricing:
    """`Pricing` at `input` and `output` currency units per million tokens, for any model."""
    if input < 0 or output < 0:
        raise ValueError(f"prices must not be negative, got input={input!r}, output={output!r}")

    def price(model: str | None, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * input + output_tokens * output) / 1_000_000

    return price


def jsonable(value: Any) -> Any:
    """`value` as JSON data: itself when it already is, else its JSON through `str`.

    Never raises: a value nested too deep for the encoder becomes a sentence saying so. What
    is JSON but cannot be stored (NaN, lone surrogates) is left for `storable` to record.
    """
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        try:
            return str(value)
        except Exception:  # noqa: BLE001  (a str() that fails says nothing worth keeping)
            return f"<a {type(value).__name__} that cannot be written as JSON>"


_log = get_logger("agentfsm.adapters")


def storable(spec: Spec) -> Spec:
    """The spec, with what came from the SDK made something a log can hold and read back.

    A tool's result that cannot be stored (NaN, a lone surrogate, nesting past the limit,
    8 MiB...) makes the call `tool.failed` with the reason: it ran, its result is not in the
    log. A model answer that cannot be stored is recorded without it. Arguments that cannot
    be stored are replaced, the same way wherever the call appears (so its digest still
    binds the proposal, the approval and the request), by `{"_unstorable": reason}`.
    """
    if callable(spec):
        return spec
    cls, fields = spec
    if cls is m.ToolCompleted:
        reason = unstorable(fields.get("result"))
        if reason is not None:
            message = f"the tool ran, but its result cannot be stored: {reason}"
            error = {"kind": "unstorable_result", "message": message, "retryable": False}
            return (m.ToolFailed, {"action_id": fields["action_id"], "error": error})
    elif cls is m.ModelCompleted:
        fields = dict(fields)
        reason = unstorable(fields.get("output"))
        if reason is not None:
            _log.warning("model.output_unstorable", reason=reason)
            fields["output"] = None
        if fields.get("tool_calls"):
            fields["tool_calls"] = [
                {**c, "arguments": _storable_arguments(c["arguments"])}
                for c in fields["tool_calls"]
            ]
        return (cls, fields)
    elif cls is m.ToolRequested or cls is m.ApprovalRequested:
        return (cls, {**fields, "arguments": _storable_arguments(fields["arguments"])})
    return spec


def _storable_arguments(arguments: Any) -> Any:
    reason = unstorable(arguments)
    return arguments if reason is None else {"_unstorable": reason}


def parse_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """A tool call's arguments as a dict; text that is not a JSON object is kept as `_raw`."""
    if isinstance(raw, dict):
        return jsonable(raw)  # type: ignore[no-any-return]
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return parsed if isinstance(parsed, dict) else {"_raw": raw}


#: Where a run waits for a person (a decision, or an answer to its `interrupt()`).
WAITING_FOR_PERSON = frozenset({RunStatus.WAITING_APPROVAL, RunStatus.PAUSED})


def subagents(store: EventStore, record: RunRecord) -> list[RunRecord]:
    """The records of the subagent runs that `record`'s running calls wait on.

    A subagent run is `<run_id>/<action_id>` (`SdkRun.subagent`); a call that waits on one is
    `started`, its outcome to come when the subagent finishes.
    """
    found = []
    for action in record.actions.values():
        if action.status == ActionStatus.STARTED:
            with contextlib.suppress(RunNotFoundError):
                found.append(store.load(f"{record.run_id}/{action.action_id}"))
    return found


def subagent_records(store: EventStore, record: RunRecord) -> list[RunRecord]:
    """`record`, then the records of the subagent runs its running calls wait on, deeper down."""
    found = [record]
    for child in subagents(store, record):
        found.extend(subagent_records(store, child))
    return found


def approved_call(
    records: Sequence[RunRecord], action_id: str, tool: str, arguments: Any
) -> Action:
    """The ledger entry of call `action_id`, from the first of `records` that holds it.

    `records` is the run and the subagent runs it waits on (`subagent_records`): a call is
    decided in the run that asked for it. The entry must be the call approval was asked for:
    the same tool name and arguments digest.

    Raises:
        ApprovalMismatchError: no run holds the call, or the SDK's call differs from it.
    """
    owner = next((r for r in records if action_id in r.actions), records[0])
    action = owner.actions.get(action_id)
    actual = call_digest(tool, arguments)
    expected = action.arguments_digest if action is not None else None
    if action is None or expected != actual:
        raise ApprovalMismatchError(
            run_id=owner.run_id, action_id=action_id, expected=expected, actual=actual
        )
    return action


def stopped_line(agent: str | None, record: RunRecord, partial: Any) -> str:
    """What a calling model reads of a subagent that a guard or a cancel stopped."""
    why = f"{record.status}, {record.stop_reason}" if record.stop_reason else record.status
    return f"the subagent '{agent}' stopped ({why}): {partial}"


def pending_in(records: Sequence[RunRecord]) -> list[tuple[str, str]]:
    """The calls waiting for a decision in `records`, as `(run_id, action_id)`."""
    return [(r.run_id, aid) for r in records for aid in r.pending_approvals]


def waiting_on(store: EventStore, record: RunRecord) -> list[tuple[str, str]]:
    """The calls a run waits on a decision for, as `(run_id, action_id)`: its subagents' too."""
    return pending_in(subagent_records(store, record))


def waits_for_person(store: EventStore, record: RunRecord) -> bool:
    """Whether the run, or a subagent run below it, waits for a person."""
    return any(r.status in WAITING_FOR_PERSON for r in subagent_records(store, record))


class Recorder:
    """Appends one SDK run's events to a store, checked and logged (see the module docstring).

    Args:
        store: any of our `EventStore`s.
        run_id: our id for the run.
        guards: Python guards (`MaxTurns(8)`, `Budget(...)`, `LoopDetector()`, ...).
        clock: stamps events and is the guards' `now` (UTC wall clock by default).
        logger: a structlog logger (by default `agentfsm._log.get_logger()`: see there).
        listeners: called with every event of the run once it is stored, in order (e.g.
            `RunSpans(tracer).feed` for live OpenTelemetry spans).
        sdk: the SDK's name, used when naming the signal behind an illegal move.
        budget: the budget tree of a subagent tree this run belongs to (see `child`).
        reserve_tokens: tokens each model call reserves (`model_call`).
        reserve_cost: cost each model call reserves.
        pricing: the cost of a model call from its tokens (`usage`).
    """

    def __init__(
        self,
        store: EventStore,
        run_id: str,
        *,
        guards: Sequence[Guard] = (),
        clock: Callable[[], datetime] = _utc_now,
        logger: Any = None,
        listeners: Sequence[Callable[[Event], None]] = (),
        sdk: str,
        budget: BudgetTree | None = None,
        reserve_tokens: int | None = None,
        reserve_cost: float | None = None,
        pricing: Pricing | None = None,
    ) -> None:
        self.store = store
        self.reserve_tokens = reserve_tokens
        self.reserve_cost = reserve_cost
        self.pricing = pricing
        self.guards = tuple(guards)
        self.budget = budget
        self._listeners = tuple(listeners)
        self._delivered = 0
        self.run_id = run_id
        self.sdk = sdk
        self.clock = clock
        self.logger = logger
        self._reducer = Reducer(store.reducer.table, guards)
        self._writer: Writer | None = None
        # Some SDKs call back from several threads at once (LangGraph's parallel tools).
        self._lock = threading.RLock()

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
            clock=self.clock,
            logger=self.logger,
            budget=self.budget,
        )
        return self._writer

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
        return Recorder(
            self.store,
            run_id,
            guards=self.guards,
            clock=self.clock,
            logger=self.logger,
            listeners=self._listeners,
            sdk=sdk,
            budget=budget,
            reserve_tokens=self.reserve_tokens,
            reserve_cost=self.reserve_cost,
            pricing=self.pricing,
        )

    def start(self, *, objective: str | None, agent: str | None, limits: Limits | None) -> None:
        """Append `run.started` for a new run."""
        self._open(self._reducer.initial(self.run_id))
        self.append(
            "run start",
            [
                (
                    m.RunStarted,
                    {
                        "objective": objective,
                        "agent": agent,
                        "limits": limits,
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
        """Continue a stored run (a resume): read its record from the store.

        A run with token or cost limits gets its budget tree back: the subagent runs it
        started before (in this process or another) count against its limits again.
        """
        record = self.store.load(self.run_id)
        if self.budget is None:
            self.budget = rebuild_tree(self.store, record, new_tree(record))
        self._open(record)
        self._delivered = record.version  # listeners hear what happens from here on
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
            if self._listeners:
                self._deliver()
            return record

    def _deliver(self) -> None:
        # Read back from the store: a batch may have had other processes' events folded in.
        for event in self.store.events(self.run_id, after=self._delivered):
            for listener in self._listeners:
                listener(event)
            self._delivered = event.sequence

    def _append(self, signal: str, specs: Sequence[Spec]) -> RunRecord:
        writer = self._writer if self._writer is not None else self._open(self.record)
        writer.begin_step()
        try:
            return writer.append(specs)
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
        return (
            m.ModelStarted,
            {"reserved_tokens": self.reserve_tokens, "reserved_cost": self.reserve_cost},
        )

    def usage(
        self, input_tokens: int | None, output_tokens: int | None, model: str | None = None
    ) -> dict[str, Any]:
        """A model call's `usage`: its tokens, and its cost when the run has `pricing`.

        The SDKs report tokens, not money; without `pricing` a `max_cost` limit never trips.
        """
        tokens_in, tokens_out = input_tokens or 0, output_tokens or 0
        usage: dict[str, Any] = {"input_tokens": tokens_in, "output_tokens": tokens_out}
        if self.pricing is not None:
            usage["cost"] = self.pricing(model, tokens_in, tokens_out)
        return usage

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
                run_id=self.run_id, name=name, reason=f"{exc}; pass the state to resume"
            ) from None
        if kept is None:
            raise SavedStateError(
                run_id=self.run_id,
                name=name,
                reason="none is kept (the run never paused for approval here); "
                "pass the state to resume",
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
                    cancel = (m.RunCancelRequested, {"reason": f"the run '{self.run_id}' {why}"})
                    recorder.append("the calling run ended", [cancel])
                recorder.cancelled()

    def terminate(self, stop: GuardStop) -> RunRecord:
        """Record `run.terminated` with the guard's verdict."""
        verdict = Verdict.of(stop.error)
        self._end_subagents(f"that called it was stopped ({verdict.stop_reason})")
        return self.append("stop", [verdict.terminated_event])

    def cancelled(self) -> RunRecord:
        """Record `run.cancelled` (calls left in flight are recorded as outcome unknown)."""
        self._end_subagents("that called it was cancelled")
        record = self.record
        specs: list[Spec] = [
            (m.ToolOutcomeUnknown, {"action_id": a.action_id, "reason": "the run was cancelled"})
            for a in record.actions.values()
            if a.status in ("requested", "started")
        ]
        specs.append((m.RunCancelled, {}))
        return self.append("cancel", specs)

    def stopped(self, stop: GuardStop | CancelStop) -> RunRecord:
        """Record how a stop ended the run: `run.terminated` or `run.cancelled`."""
        return self.terminate(stop) if isinstance(stop, GuardStop) else self.cancelled()

    def failed(self, exc: BaseException) -> None:
        """Record `run.failed` for what the SDK raised, unless the run cannot take it."""
        kind = "illegal_transition" if isinstance(exc, LifecycleError) else type(exc).__name__
        # Already ended (or never started): the original error says what happened.
        with contextlib.suppress(LifecycleError, GuardStop, CancelStop):
            self.fail(kind, str(exc))

    def fail(self, kind: str, message: str) -> RunRecord:
        """Record `run.failed` with an error the SDK raised."""
        self._end_subagents("that called it failed")
        error = {"kind": kind, "message": message}
        return self.append("failure", [(m.RunFailed, {"error": error})])


class RunOptions(TypedDict, total=False):
    """The options every adapter's run takes, for adapters that add their own (see `SdkRun`)."""

    guards: Sequence[Guard]
    clock: Callable[[], datetime]
    logger: Any
    listeners: Sequence[Callable[[Event], None]]
    reserve_tokens: int | None
    reserve_cost: float | None
    pricing: Pricing | None


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
    ) -> None:
        for value, what in ((reserve_tokens, "reserve_tokens"), (reserve_cost, "reserve_cost")):
            if value is not None and value < 0:
                raise ValueError(f"{what} must not be negative, got {value!r}")
        self.recorder = Recorder(
            store, run_id, guards=guards, clock=clock, logger=logger, listeners=listeners,
            sdk=self.sdk, reserve_tokens=reserve_tokens, reserve_cost=reserve_cost,
            pricing=pricing,
        )  # fmt: skip
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
        """What `resume` returns when there is nothing to drive; None when there is.

        A run that already ended is returned as it is, like `Runner.resume` does: resuming
        it again is not an error, and nothing runs. A run asked to cancel while it waited is
        ended here: nothing drove it when the cancel came (it waited for a decision, or on
        a subagent that did), so the resume settles it: `run.cancelled`, a call it waited on
        outcome unknown, and the subagents still waiting cancelled first.
        """
        if record.status in self.recorder.store.reducer.table.terminal_states:
            final = record.final_output if record.status == RunStatus.COMPLETED else None
            return ObservedRun(record.run_id, record, final_output=final)
        if record.status != RunStatus.CANCEL_REQUESTED:
            return None
        done = self.recorder.cancelled()
        if state is not None:
            self.recorder.forget_state(state)
        return ObservedRun(record.run_id, done)

    def _attach(self) -> None:
        """Build the SDK-facing part (hooks, callback handler) around `self.recorder`."""
