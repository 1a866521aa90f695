"""The stops the SDK adapters carry through an SDK's own code.

    Exception
     ├── GuardStop                           a guard refused: stop the SDK, terminate the run
     └── CancelStop                          the run was asked to cancel: stop the SDK
          └── WaitStop                       an event a call caused made the run wait: stop

They are no `AgentFSMError`: they are signals an adapter raises through the SDK and catches
again around it, never what a user sees (`tests/test_errors.py` lists them as such). What the
adapters raise to a user is in `agentfsm.errors`.
"""

from __future__ import annotations

from agentfsm.errors import GuardRejectedError
from agentfsm.record import RunRecord

__all__ = ["CancelStop", "GuardStop", "WaitStop"]


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
