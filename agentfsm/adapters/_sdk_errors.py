"""What the SDK adapters raise, and the stops they carry through an SDK.

    AgentFSMError
     ├── IllegalTransitionError
     │    └── SignalIllegalTransitionError   the table refused an SDK's move; names the signal
     ├── ApprovalMismatchError               the SDK state's call is not the approved one
     └── SavedStateError                     the kept SDK state cannot resume the run

    Exception
     ├── GuardStop                           a guard refused: stop the SDK, terminate the run
     └── CancelStop                          the run was asked to cancel: stop the SDK
          └── WaitStop                       an event a call caused made the run wait: stop

The stops are no `AgentFSMError`: they are signals an adapter raises through the SDK's own
code and catches again around it, never what a user sees.
"""

from __future__ import annotations

from agentfsm.errors import AgentFSMError, GuardRejectedError, IllegalTransitionError
from agentfsm.record import RunRecord

__all__ = [
    "ApprovalMismatchError",
    "CancelStop",
    "GuardStop",
    "SavedStateError",
    "SignalIllegalTransitionError",
    "WaitStop",
]


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


class WaitStop(CancelStop):
    """An event of the run's own lifecycle that a call caused moved the run where a Runner
    would return (a state that waits for a person, is paused, or ends the run): the SDK run
    must stop before it calls the model again, and the run stays where its table put it.

    A `CancelStop`, so every place that stops the SDK for a cancel stops it for this too;
    only what is recorded differs: nothing (`Recorder.stopped`).
    """

    def __init__(self, record: RunRecord) -> None:
        CancelStop.__init__(self, record)
        self.args = (f"run '{record.run_id}' waits in '{record.status}'",)
