"""Every exception agentfsm raises, in one tree.

::

    AgentFSMError
    ├── InvalidTableError (ValueError)          a table that cannot be built; .problems lists all
    ├── EventFormatError (ValueError)           wire input that is not a valid event
    ├── InvalidRunIdError (ValueError)          a run id no store can hold (empty, NUL, ...)
    ├── UnknownTableError (LookupError)         a run names a table no registry knows
    ├── LifecycleError                          a well-formed event that breaks the run's lifecycle
    │   ├── IllegalTransitionError              not in the table, or no condition held
    │   │   └── SignalIllegalTransitionError    ... caused by an SDK's signal, which it names
    │   ├── SequenceError                       a gap, repeat or wrong start in `sequence`
    │   ├── RunMismatchError                    the event belongs to another run
    │   ├── ActionError                         the ledger refuses it (unknown id, changed call)
    │   │   └── AlreadyDecidedError             a decision on a call someone already decided
    │   ├── TableMismatchError                  the run is under another table than the fold's
    │   ├── MigrationError                      a `run.migrated` the run cannot take
    │   ├── ForkError                           a point a run cannot be forked at
    │   └── GuardRejectedError                  a limit said no: max turns, deadline, budget, loop
    │       └── OverrunError                    a recorded event took spending past a budget
    ├── StoreError
    │   ├── ConcurrencyConflictError            someone else appended first
    │   ├── CorruptLogError                     stored data that does not read back
    │   │   ├── StoreInconsistentError          the runs row and the log disagree
    │   │   └── TruncatedLogError               the log is shorter than its external anchor
    │   ├── IntegrityKeyError                   the handle's key is not the one the store records
    │   ├── AnchorError                         the external anchor cannot be read or written
    │   ├── RunHeldError                        a live driver holds the run's lease
    │   ├── RunNotFoundError (LookupError)      the store has no such run
    │   ├── StoreFullError                      a memory store at its cap refuses a new run
    │   └── SchemaBehindError                   Procrastinate's schema is older than its code
    ├── RunSupersededError                      another process drove the run meanwhile
    │   └── LeaseLostError                      the driver's lease expired or was taken over
    ├── UnknownAgentError (LookupError)         a run names an agent the Runner was not given
    ├── ModelError                              yours to raise from a model: may a retry help?
    │   └── IncompleteStreamError               a streamed tool call that never completed
    ├── ToolError                               yours to raise from a tool: a failure it knows
    ├── OutcomeUnknownError                     yours to raise from a tool: did its effect happen?
    ├── ApprovalMismatchError                   the SDK state's call is not the approved one
    ├── SavedStateError                         the kept SDK state cannot resume the run
    ├── UnknownModelError (LookupError)         a `Pricing` has no price for the model
    ├── FinishedCallError (RuntimeError)        LangGraph re-ran a call that already finished
    ├── RefusedCallError (ToolInvocationError)  a call the run refused        [adapters.langgraph]
    ├── DiagramError
    │   ├── ToolMissingError (RuntimeError)     an external renderer (Graphviz `dot`) is absent
    │   ├── RenderError (RuntimeError)          the external renderer refused the input
    │   └── RunNotInLogError (ValueError)       the log has no such run, or several to choose from
    ├── UnknownRunTableError                    the web UI does not know a run's table
    └── IllegalLogError (AssertionError)        a log `assert_legal_log` refuses   [testing]

All are defined here but the two marked with the namespace that defines them (their bases or
their data are of higher layers: LangGraph's `ToolInvocationError`, the testing kit's `Step`);
the namespaces a user imports from (`agentfsm`, `agentfsm.runtime`, `agentfsm.diagrams`,
`agentfsm.stores`, the adapters) re-export the ones their calls raise. A builtin base in
parentheses is kept so that code catching that builtin (a missing key, a bad value) catches
these too. `tests/test_errors.py` holds this drawing to the classes.

"Not in the table" (`IllegalTransitionError`) is kept apart from "a limit said no"
(`GuardRejectedError`): the first is a bug in whoever produced the event, the second is
the machine doing its job. `ModelError`, `ToolError` and `OutcomeUnknownError` are raised by
your model and tool code, for the Runner: it records them as events rather than raising them.

Not drawn: the signals agentfsm raises and catches inside itself (a stop carried through an
SDK's code, a driver re-deciding); none reaches a caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = [
    "ActionError",
    "AgentFSMError",
    "AlreadyDecidedError",
    "AnchorError",
    "ApprovalMismatchError",
    "ConcurrencyConflictError",
    "CorruptLogError",
    "DiagramError",
    "EventFormatError",
    "FinishedCallError",
    "ForkError",
    "GuardRejectedError",
    "IllegalTransitionError",
    "IncompleteStreamError",
    "IntegrityKeyError",
    "InvalidRunIdError",
    "InvalidTableError",
    "LeaseLostError",
    "LifecycleError",
    "MigrationError",
    "ModelError",
    "OutcomeUnknownError",
    "OverrunError",
    "RenderError",
    "RunHeldError",
    "RunMismatchError",
    "RunNotFoundError",
    "RunNotInLogError",
    "RunSupersededError",
    "SavedStateError",
    "SchemaBehindError",
    "SequenceError",
    "SignalIllegalTransitionError",
    "StoreError",
    "StoreFullError",
    "StoreInconsistentError",
    "TableMismatchError",
    "ToolError",
    "ToolMissingError",
    "TruncatedLogError",
    "UnknownAgentError",
    "UnknownModelError",
    "UnknownRunTableError",
    "UnknownTableError",
]


def quote_list(names: Sequence[str]) -> str:
    """Render names as `'a', 'b'`, or `none` when there are none."""
    return ", ".join(f"'{n}'" for n in names) if names else "none"


#: Characters of a value's `repr` an error message shows.
QUOTED = 80


def quoted(value: object) -> str:
    """`repr(value)`, clipped to `QUOTED` characters: a value from a line, a file or a model
    can be megabytes, and a message names it to be recognised, not to carry it."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an integer past Python's 4,300 printable digits, or
        # a value whose own repr fails: the message must still be made
        return f"a {type(value).__name__} that cannot be shown"
    return text if len(text) <= QUOTED else f"{text[: QUOTED - 1]}…"


class AgentFSMError(Exception):
    """The base of every error agentfsm raises on purpose."""


class InvalidTableError(AgentFSMError, ValueError):
    """A transition table failed validation; `.problems` holds one sentence per problem."""

    def __init__(self, name: str, problems: Sequence[str]) -> None:
        self.table = name
        self.problems: tuple[str, ...] = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"table '{name}' is invalid ({len(self.problems)} problems):\n{lines}")


class EventFormatError(AgentFSMError, ValueError):
    """Input that is not a valid event: not JSON, unknown type, missing/extra/mistyped field.

    Attributes:
        line: 1-based line number in the input, when known.
        run_id: the run named by the input, when it could be read.
        sequence: the sequence named by the input, when it could be read.
        problems: one sentence per field problem.
    """

    def __init__(
        self,
        problems: Sequence[str],
        *,
        line: int | None = None,
        run_id: str | None = None,
        sequence: int | None = None,
    ) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        self.line = line
        self.run_id = run_id
        self.sequence = sequence
        where = []
        if line is not None:
            where.append(f"line {line}")
        if run_id is not None:
            where.append(f"run '{run_id}'")
        if sequence is not None:
            where.append(f"sequence {sequence}")
        prefix = f"{', '.join(where)}: " if where else ""
        super().__init__(f"{prefix}not a valid event: {'; '.join(self.problems)}")


class LifecycleError(AgentFSMError):
    """A well-formed event that the run's lifecycle refuses. Nothing was applied.

    Attributes:
        run_id: the run the event was applied to.
        sequence: the event's sequence number.
        state: the run's status when the event arrived.
        event: the event type.
        allowed: event types the table allows from `state`, sorted.
        reason: the sentence after the location, without it.
    """

    kind = "lifecycle"

    def __init__(
        self,
        reason: str,
        *,
        run_id: str,
        sequence: int,
        state: str,
        event: str,
        allowed: Sequence[str] = (),
    ) -> None:
        self._reason = reason
        self.run_id = run_id
        self.sequence = sequence
        self.state = state
        self.event = event
        self.allowed: tuple[str, ...] = tuple(allowed)
        # The message is rendered when it is read, not here: refusals on the hot path (a
        # validator probing, a runtime re-deciding) are usually caught and never printed.
        super().__init__()

    @property
    def reason(self) -> str:
        """The sentence after the location: what is wrong and what would have been legal."""
        return self._reason

    def __str__(self) -> str:
        return self._render()

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructors do not survive the default pickling of exceptions;
        # multiprocessing workers send these across processes.
        state = dict(self.__dict__)
        return (_rebuild, (type(self), state))

    def _render(self) -> str:
        return (
            f"run '{self.run_id}' is '{self.state}': event '{self.event}' "
            f"(sequence {self.sequence}) {self.reason}"
        )


class IllegalTransitionError(LifecycleError):
    """The table has no edge for (state, event), or none of its conditions held.

    Attributes:
        terminal: whether `state` is terminal (every event is illegal there).
        failed_conditions: names of the conditions that were tried and did not hold.
        due_at: when the timed edge among them falls due, for an event that came before
            its time (`Transition(after=...)`); None otherwise.
    """

    kind = "illegal_transition"
    due_at: str | None = None

    def __init__(
        self,
        *,
        run_id: str,
        sequence: int,
        state: str,
        event: str,
        allowed: Sequence[str],
        terminal: bool = False,
        failed_conditions: Sequence[str] = (),
    ) -> None:
        self.terminal = terminal
        self.failed_conditions: tuple[str, ...] = tuple(failed_conditions)
        super().__init__(
            "", run_id=run_id, sequence=sequence, state=state, event=event, allowed=allowed
        )

    @classmethod
    def quick(
        cls,
        run_id: str,
        sequence: int,
        state: str,
        event: str,
        allowed: tuple[str, ...],
        terminal: bool,
        failed_conditions: tuple[str, ...],
    ) -> IllegalTransitionError:
        """The same error as the constructor gives, built without its keyword plumbing.

        The reducer raises this on every refused event; validators probing candidates raise
        and catch it in a loop, so the two nested keyword `__init__` calls were worth saving.
        """
        err = cls.__new__(cls)
        err.__dict__.update(
            _reason="", run_id=run_id, sequence=sequence, state=state, event=event,
            allowed=allowed, terminal=terminal, failed_conditions=failed_conditions,
        )  # fmt: skip
        return err

    @property
    def reason(self) -> str:
        """Why the move is illegal, and the event types that would have been allowed."""
        failed = self.failed_conditions
        if len(failed) == 1:
            why = f"is not allowed: condition '{failed[0]}' does not hold"
        elif failed:
            why = f"is not allowed: none of the conditions {quote_list(failed)} holds"
        else:
            why = "is not allowed"
        if self.due_at is not None:
            why += f" (it comes before its time: the timeout falls due at {self.due_at})"
        return f"{why}; allowed: {quote_list(self.allowed)}"

    def _render(self) -> str:
        terminal = " (terminal)" if self.terminal else ""
        return (
            f"run '{self.run_id}' is '{self.state}'{terminal}: event '{self.event}' "
            f"(sequence {self.sequence}) {self.reason}"
        )


class SequenceError(LifecycleError):
    """The event's sequence is not the next one (gap, repeat, or not starting at 1).

    Attributes:
        expected: the sequence that would have been accepted.
    """

    kind = "sequence"

    def __init__(
        self, *, run_id: str, sequence: int, expected: int, state: str, event: str
    ) -> None:
        self.expected = expected
        what = "repeats an applied sequence" if sequence < expected else "leaves a gap"
        super().__init__(
            f"{what}: expected sequence {expected}",
            run_id=run_id,
            sequence=sequence,
            state=state,
            event=event,
        )


class RunMismatchError(LifecycleError):
    """The event names a different run than the record it is applied to.

    Attributes:
        event_run_id: the run the event names.
    """

    kind = "run_mismatch"

    def __init__(
        self, *, run_id: str, event_run_id: str, sequence: int, state: str, event: str
    ) -> None:
        self.event_run_id = event_run_id
        super().__init__(
            f"belongs to run '{event_run_id}'",
            run_id=run_id,
            sequence=sequence,
            state=state,
            event=event,
        )


class ActionError(LifecycleError):
    """The action ledger refuses the event.

    For example: an unknown or reused action id, a call that changed since it was proposed or
    approved, an expired approval, a result for an action that is not in flight.

    Attributes:
        action_id: the action the event names.
    """

    kind = "action"

    def __init__(
        self, reason: str, *, action_id: str, run_id: str, sequence: int, state: str, event: str
    ) -> None:
        self.action_id = action_id
        super().__init__(
            f"for action '{action_id}' is refused: {reason}",
            run_id=run_id,
            sequence=sequence,
            state=state,
            event=event,
        )


class AlreadyDecidedError(ActionError):
    """A decision on a call that someone already decided: the first decision stands.

    A second approver (another tab, another person, a retried request) is told who decided,
    when and why, instead of the table's "not allowed" for the state the run has moved on to.
    Nothing was written.

    Attributes:
        decision: `approved` or `rejected`.
        decided_by: who decided it, if they were named.
        decided_at: when (the deciding event's `occurred_at`).
        decided_sequence: the deciding event's sequence.
        decided_reason: the reason given with the decision, if any.
    """

    def __init__(
        self,
        *,
        action_id: str,
        decision: str,
        decided_by: str | None,
        decided_at: str,
        decided_sequence: int,
        decided_reason: str | None,
        run_id: str,
        sequence: int,
        state: str,
        event: str,
    ) -> None:
        self.decision = decision
        self.decided_by = decided_by
        self.decided_at = decided_at
        self.decided_sequence = decided_sequence
        self.decided_reason = decided_reason
        by = f" by '{decided_by}'" if decided_by is not None else ""
        why = f", with the reason '{decided_reason}'" if decided_reason is not None else ""
        # Past ActionError's "for action ... is refused" wording: the call, not the event, is
        # what the person asked about.
        self.action_id = action_id
        LifecycleError.__init__(
            self,
            f"call '{action_id}' was already {decision}{by} at {decided_at} "
            f"(sequence {decided_sequence}){why}",
            run_id=run_id, sequence=sequence, state=state, event=event,
        )  # fmt: skip

    def _render(self) -> str:
        return f"run '{self.run_id}': {self.reason}"


class TableMismatchError(LifecycleError):
    """A run is folded with a table other than the one it is under.

    A run is under the table its `run.started` names until a `run.migrated` moves it to
    another; it is folded with that table (a reducer of a newer version folds the part
    before a migration with the older one, when it can find it).

    Attributes:
        started_under: `name (digest)` of the table the run is under at `sequence` (the one
            its `run.started` names, or the one a `run.migrated` moved it to).
        folded_with: `name (digest)` of the table it is being folded with.
    """

    kind = "table"

    def __init__(
        self,
        *,
        run_id: str,
        sequence: int,
        started_under: str,
        folded_with: str,
        state: str = "created",
        event: str = "run.started",
        reason: str | None = None,
    ) -> None:
        self.started_under = started_under
        self.folded_with = folded_with
        super().__init__(
            reason
            or f"was started under table {started_under}, not {folded_with}: fold it with the "
            "table it started with (`--table`, or the registry of `agentfsm.fsm.registry`)",
            run_id=run_id,
            sequence=sequence,
            state=state,
            event=event,
        )


class MigrationError(LifecycleError):
    """A `run.migrated` the run cannot take: it names another table than the one the run is
    under, or the new table has no place for the run's state.

    Attributes:
        from_table: `name (digest)` of the table the event moves the run from.
        to_table: `name (digest)` of the table it moves the run to.
        problems: one sentence per reason, e.g. `state 'escalated_urgent' is not in the new
            table`.
    """

    kind = "migration"

    def __init__(
        self,
        *,
        run_id: str,
        sequence: int,
        state: str,
        from_table: str,
        to_table: str,
        problems: Sequence[str],
    ) -> None:
        self.from_table = from_table
        self.to_table = to_table
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__(
            f"cannot move the run from table {from_table} to {to_table}: "
            + "; ".join(self.problems),
            run_id=run_id,
            sequence=sequence,
            state=state,
            event="run.migrated",
        )


class ForkError(LifecycleError):
    """A run cannot be forked at that sequence: there its table lets it go no further (it
    has ended), or a call is in flight, whose outcome the fork could never learn.

    `run_id`, `sequence` and `state` name the source run, the sequence asked for and the
    run's state after it; `reason` says why and where a fork could be taken instead.
    """

    kind = "fork"

    def __init__(self, reason: str, *, run_id: str, sequence: int, state: str) -> None:
        super().__init__(reason, run_id=run_id, sequence=sequence, state=state, event="run.forked")

    def _render(self) -> str:
        return (
            f"run '{self.run_id}' cannot be forked at sequence {self.sequence} "
            f"(it is '{self.state}' there): {self.reason}"
        )


class GuardRejectedError(LifecycleError):
    """A limit guard refused the event: the run must stop with `stop_reason`.

    Attributes:
        guard: the guard's name.
        stop_reason: `max_turns`, `deadline`, `budget`, `loop_detected`, or a user's reason.
        detail: a sentence a person can read, e.g. `3 of 3 turns used`.
    """

    kind = "guard"
    _what = "is refused by guard"

    def __init__(
        self,
        *,
        guard: str,
        stop_reason: str,
        detail: str,
        run_id: str,
        sequence: int,
        state: str,
        event: str,
    ) -> None:
        self.guard = guard
        self.stop_reason = stop_reason
        self.detail = detail
        super().__init__(
            f"{self._what} '{guard}' ({stop_reason}): {detail}",
            run_id=run_id,
            sequence=sequence,
            state=state,
            event=event,
        )


class OverrunError(GuardRejectedError):
    """An accepted event recorded spending past a budget: the run must stop right after it.

    Unlike its base, nothing was refused: the event is a fact (the call happened, and its
    usage is recorded), and the run is overspent from that event on. Audits report it at
    that event; the runtime appends it and then `run.terminated` with `stop_reason`.
    """

    _what = "overran the limit of guard"


def _rebuild(cls: type[LifecycleError], state: dict[str, Any]) -> LifecycleError:
    error = cls.__new__(cls)
    Exception.__init__(error)
    error.__dict__.update(state)
    return error


class StoreError(AgentFSMError):
    """A store could not do what was asked."""


class StoreFullError(StoreError):
    """A memory store with a cap (`MemoryStorage(max_runs=..., max_events=...)`) is at it:
    a new run is refused (nothing was written); the runs it holds still go on.

    Attributes:
        run_id: the run refused.
        cap: which cap: `"max_runs"` or `"max_events"`.
        limit: the cap's value.
    """

    def __init__(self, run_id: str, cap: str, limit: int) -> None:
        self.run_id = run_id
        self.cap = cap
        self.limit = limit
        what = "runs" if cap == "max_runs" else "events"
        super().__init__(
            f"run '{run_id}' refused: the memory store holds its cap of {limit:,} {what} "
            f"({cap}); it keeps everything in this process, for tests and single-process "
            "use: use a SQLite or PostgreSQL store for more"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.run_id, self.cap, self.limit))


class ConcurrencyConflictError(StoreError):
    """Another writer appended first: the stored version is not the expected one.

    Attributes:
        run_id: the run.
        expected_version: the version the caller based its append on.
        actual_version: the version in the store.
    """

    def __init__(self, *, run_id: str, expected_version: int, actual_version: int) -> None:
        self.run_id = run_id
        self.expected_version = expected_version
        self.actual_version = actual_version
        super().__init__(
            f"run '{run_id}': expected version {expected_version}, but the store is at "
            f"version {actual_version}; reload the run and try again"
        )


class CorruptLogError(StoreError):
    """Stored data that does not read back as a valid run: it names the run and sequence.

    Attributes:
        run_id: the run.
        sequence: the first sequence that is wrong, when known.
    """

    def __init__(self, message: str, *, run_id: str, sequence: int | None = None) -> None:
        self.run_id = run_id
        self.sequence = sequence
        at = f", sequence {sequence}" if sequence is not None else ""
        super().__init__(f"run '{run_id}'{at}: {message}")


class StoreInconsistentError(CorruptLogError):
    """The store's tables disagree about a run: its runs row is not where its log ends.

    Appends cannot go on (every one would look like a lost race); an operator must repair
    the store. `verify(run_id)` reports the same disagreement.

    Attributes:
        run_id: the run.
        runs_version: the version the runs row holds (0: there is no runs row).
        log_at: the sequences the log holds from `runs_version` on (at most two).
    """

    def __init__(self, *, run_id: str, runs_version: int, log_at: tuple[int, ...]) -> None:
        self.runs_version = runs_version
        self.log_at = log_at
        if runs_version == 0:
            says = "the runs table has no row for the run"
        else:
            says = f"the runs table says version {runs_version}"
        if log_at and log_at[-1] > runs_version:
            found = f"the log goes on to sequence {log_at[-1]}"
        else:
            found = f"the log has no event at sequence {runs_version}"
        super().__init__(
            f"store inconsistent: {says}, but {found}; it was changed outside agentfsm "
            "(see `verify`)",
            run_id=run_id,
        )


class TruncatedLogError(CorruptLogError):
    """A run's log ends before the head its external anchor records: rows were removed.

    A hash chain proves each row it holds, not that none is missing from its end; an anchor
    kept outside the store (`StoreOptions(anchor=...)`, `agentfsm verify --anchor`) does.
    A run in this state is not driven: its missing events may be calls already made.

    Attributes:
        run_id: the run.
        sequence: the first sequence that should be there (or the anchored one that changed).
        log_version: where the stored log ends (0: the run is gone).
        anchored_version: the version the anchor records.
    """

    def __init__(
        self, message: str, *, run_id: str, sequence: int, log_version: int, anchored_version: int
    ) -> None:
        self.log_version = log_version
        self.anchored_version = anchored_version
        super().__init__(message, run_id=run_id, sequence=sequence)


class IntegrityKeyError(StoreError):
    """A handle whose integrity key is not the one the store records, or a store being
    re-keyed: refused before it reads or writes a run, since every link it judged or wrote
    would be under the wrong key.

    Attributes:
        store_key: what the store records: `unkeyed`, `hmac-sha256:<key id>`, or
            `rekeying <from> -> <to>` (None: it records nothing yet).
        handle_key: the handle's own: `unkeyed` or `hmac-sha256:<key id>`.
    """

    def __init__(self, message: str, *, store_key: str | None, handle_key: str) -> None:
        self.store_key = store_key
        self.handle_key = handle_key
        super().__init__(message)


class AnchorError(StoreError):
    """A store's external anchor could not be read or written.

    Raised after a commit whose head the anchor did not take: the events are stored, but
    the run is not to be driven on until the anchor records them (else a truncation of
    them would go unnoticed).
    """


class InvalidRunIdError(AgentFSMError, ValueError):
    """A run id no store can hold: not a str, empty, or with a NUL or a lone surrogate.

    Attributes:
        run_id: the id as given.
    """

    def __init__(self, run_id: object, problem: str) -> None:
        self.run_id = run_id
        super().__init__(f"run id {run_id!r} cannot be stored: {problem}")


class RunNotFoundError(StoreError, LookupError):
    """The store has no run by that id (nothing was ever appended to it).

    Attributes:
        run_id: the run asked for.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(
            f"run '{run_id}' is not in the store; start it by appending 'run.started' "
            "with expected_version 0"
        )


class _Described(Protocol):
    """Who holds a run's lease, as an error names it (`agentfsm.stores.Holder`)."""

    @property
    def run_id(self) -> str: ...

    @property
    def id(self) -> str: ...

    def describe(self) -> str: ...


class RunHeldError(StoreError):
    """A live driver holds the run's lease: a second driver, or a verb that would change
    the run under it, is refused (nothing was written).

    Attributes:
        run_id: the run asked for (a subagent run is held with its root).
        holder: who holds it (`agentfsm.stores.Holder`: its id, process, last heartbeat).
        waited: the seconds waited for it in vain, if the caller waited.
    """

    def __init__(self, run_id: str, holder: _Described, *, waited: float | None = None) -> None:
        self.run_id = run_id
        self.holder = holder
        self.waited = waited
        under = f" (with its root '{holder.run_id}')" if holder.run_id != run_id else ""
        after = f", still after waiting {waited:g} s" if waited else ""
        super().__init__(
            f"run '{run_id}'{under} is being driven by {holder.describe()}{after}; "
            "wait for it or stop it"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword arguments do not survive the default pickling of exceptions.
        return (_held, (self.run_id, self.holder, self.waited))


def _held(run_id: str, holder: _Described, waited: float | None) -> RunHeldError:
    return RunHeldError(run_id, holder, waited=waited)


class _TableRef(Protocol):
    """A table as a run names it (`agentfsm.events.TableRef`): its name and digest."""

    @property
    def name(self) -> str: ...

    @property
    def digest(self) -> str: ...


#: The entry point group packages publish their tables under (`agentfsm.fsm.registry`).
_ENTRY_POINT_GROUP = "agentfsm.tables"


class UnknownTableError(AgentFSMError, LookupError):
    """No known table has the digest a run was started under (`agentfsm.fsm.registry`).

    Attributes:
        ref: the table the run names (`agentfsm.events.TableRef`).
        same_name: digests of known tables with the same name (other versions).
    """

    def __init__(self, ref: _TableRef, same_name: list[str]) -> None:
        self.ref = ref
        self.same_name = same_name
        versions = (
            f"; known versions of '{ref.name}': {', '.join(same_name)}"
            if same_name
            else f"; no table named '{ref.name}' is known"
        )
        super().__init__(
            f"table '{ref.name}' ({ref.digest}) is not registered{versions}: pass it with "
            f"--table MODULE:ATTR, register() it, or publish it under the '{_ENTRY_POINT_GROUP}' "
            "entry point group"
        )


class UnknownRunTableError(AgentFSMError):
    """A run is under a table the web UI's server does not know (start it with --table)."""


class SchemaBehindError(StoreError):
    """Procrastinate's schema in the database is older than the installed Procrastinate."""


# -- the runtime ----------------------------------------------------------------------------


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


class ModelError(AgentFSMError):
    """A model call failed; raise it from an adapter to say whether a retry may help.

    Any other exception from a model ends the run as `failed` (kind `model_error`) at once.

    Args:
        message: what went wrong.
        retryable: the Runner may call the model again (with backoff, up to the
            configured number of attempts) — rate limits, timeouts, a cut stream.
    """

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable


class IncompleteStreamError(ModelError):
    """The stream ended with a tool call whose arguments never completed or parsed.

    Attributes:
        index: the call's position in the stream.
    """

    def __init__(self, message: str, *, index: int) -> None:
        super().__init__(message, retryable=True)
        self.index = index


class ToolError(AgentFSMError):
    """A failure the tool understands, recorded as `tool.failed` and shown to the model.

    Args:
        message: what went wrong, for the model and for people.
        kind: a machine-readable kind (`not_found`, `rate_limited`, ...).
        retryable: trying again may succeed (the Runner retries only tools that are
            safe to repeat, up to their `max_attempts`).
    """

    def __init__(self, message: str, *, kind: str = "tool_error", retryable: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.retryable = retryable


class OutcomeUnknownError(AgentFSMError):
    """The tool cannot tell whether its effect happened (e.g. a timeout after sending).

    Recorded as `tool.outcome_unknown`, never as failed: someone must look.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# -- the SDK adapters -----------------------------------------------------------------------


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


class UnknownModelError(AgentFSMError, LookupError):
    """A `Pricing` was asked the price of a model it has no price for (or of no model).

    Under a cost limit the adapter lets it end the run (`run.failed`, re-raised): a cost it
    cannot compute would leave the limit unchecked. Without one the call's cost is left out
    and a warning logged.

    Attributes:
        model: the model's name as the SDK reported it, or None when it reported none.
        known: the models the table has prices for.
    """

    def __init__(self, model: str | None, known: tuple[str, ...] = ()) -> None:
        self.model = model
        self.known = known
        what = f"model {model!r}" if model is not None else "a model call that names no model"
        listed = ", ".join(repr(k) for k in known) if known else "none"
        super().__init__(f"no price for {what} (the price table has: {listed})")


class FinishedCallError(AgentFSMError, RuntimeError):
    """LangGraph started a tool call again that already ran to its end in this run.

    A node that pauses (a tool's `interrupt()`, a `delegate`d subagent waiting for approval)
    runs again from its start when the graph resumes, so the other calls of its `ToolNode`
    batch would run twice. The adapter refuses before the tool runs; `ToolNode` hands the
    message to the model (or, not handling tool errors, the run fails). Give each tool call
    a task of its own (`Send`, as `create_react_agent(version="v2")` does), and a resume
    repeats none.
    """

    def __init__(self, run_id: str, action_id: str, status: str) -> None:
        super().__init__(
            f"call '{action_id}' already ran in run '{run_id}' ({status}): LangGraph re-ran "
            "its node on resume, and a finished call does not run twice; give each tool call "
            "a task of its own (Send) so a resume repeats none"
        )
        self.run_id = run_id
        self.action_id = action_id


# -- the diagrams ---------------------------------------------------------------------------


class DiagramError(AgentFSMError):
    """The base of the diagram tools' errors.

    The text formats (Mermaid, DOT, PlantUML, Markdown) never raise these: they need no tool.
    """


class ToolMissingError(DiagramError, RuntimeError):
    """An external program a format needs is not installed.

    Attributes:
        tool: the program's name, e.g. `dot`.
        install: the command that installs it, e.g. `apt-get install graphviz`.
    """

    def __init__(self, tool: str, install: str, needed_for: str) -> None:
        self.tool = tool
        self.install = install
        super().__init__(
            f"'{tool}' is not installed (needed for {needed_for}); install it with `{install}`"
        )


class RenderError(DiagramError, RuntimeError):
    """An external renderer failed on the input.

    Attributes:
        tool: the program's name.
        returncode: its exit status.
        stderr: what it printed on standard error.
    """

    def __init__(self, tool: str, returncode: int, stderr: str) -> None:
        self.tool = tool
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"'{tool}' failed with exit status {returncode}: {stderr.strip()}")


class RunNotInLogError(DiagramError, ValueError):
    """A log given to draw a run holds no such run, or several when none was named.

    Attributes:
        run_id: the run asked for, or None when none was named.
        available: the runs the log holds, in order of first appearance (the message
            names the first ten).
    """

    def __init__(self, run_id: str | None, available: Sequence[str]) -> None:
        self.run_id = run_id
        self.available: tuple[str, ...] = tuple(available)
        if run_id is not None:
            msg = f"the log has no run '{run_id}'; it has: {_some(self.available)}"
        elif not self.available:
            msg = "the log has no events"
        else:
            msg = (
                f"the log holds {len(self.available):,} runs ({_some(self.available)}); "
                "name one with a run id"
            )
        super().__init__(msg)


#: Runs a message names at most: a log may hold a million.
_NAMED = 10


def _some(names: Sequence[str]) -> str:
    """`'a', 'b'`, or the first `_NAMED` and how many more."""
    if len(names) <= _NAMED:
        return quote_list(names)
    return f"{quote_list(names[:_NAMED])}, and {len(names) - _NAMED:,} more"
