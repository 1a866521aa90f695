"""What the sans-IO drive core asks its shell to do (effects), and what it is told back.

The core (`_drive.Driver`) is a generator: it yields an effect, the shell performs it (the
sync `Runner` with direct calls, the `AsyncRunner` with awaits) and sends back the outcome.
Whatever crosses that boundary is a value: a refused append is a `Refused`, a raising model
or tool a `Raised`, a child run that waits for a person a `Waiting`. Only errors that end
the whole drive (a store outage, a bug, a `BaseException`) travel up as exceptions.

| effect    | the shell                                     | sends back                     |
|-----------|-----------------------------------------------|--------------------------------|
| `Beat`    | calls the caller's heartbeat (or `confirm`)    | None                           |
| `Append`  | `writer.append(specs, then)`                   | the record after, or `Refused` |
| `Largest` | `writer.largest_call()`                        | (tokens, cost)                 |
| `Ask`     | calls the agent's model, assembles a stream    | a `Decision`, or `Raised`      |
| `Sleep`   | waits                                          | None                           |
| `Call`    | calls the tool (on a thread, within a timeout) | `Returned` or `Raised`         |
| `Load`    | `store.load(run_id)`                           | the record (None if missing)   |
| `Start`   | appends a `run.started` at version 0           | the record                     |
| `Cancel`  | `control.cancel` on a run                      | None                           |
| `Batch`   | runs each work's job (in turn, or concurrently) | each job's `End`, in order     |
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from datetime import datetime
from typing import Any, TypeVar

import attrs

from agentfsm.errors import GuardRejectedError, IllegalTransitionError, RunSupersededError
from agentfsm.events import models as m
from agentfsm.record import RunRecord
from agentfsm.runtime._plan import Work
from agentfsm.runtime._writer import RunWriter, Spec, StateChanged, Then
from agentfsm.runtime.agent import Agent, RunResult
from agentfsm.runtime.model import ModelContext
from agentfsm.runtime.tools import Tool, ToolContext

# Effects and outcomes are `attrs.define` (slotted, not frozen) because a frozen instance
# costs twice as much to build, and a turn builds a dozen: nothing mutates them.

__all__ = [
    "Append",
    "Ask",
    "Batch",
    "Beat",
    "Call",
    "Cancel",
    "Effect",
    "End",
    "Job",
    "Largest",
    "Later",
    "Load",
    "Raised",
    "Refused",
    "Returned",
    "Sleep",
    "Start",
    "Steps",
    "Waiting",
    "appended",
    "settle",
    "stops",
]


@attrs.define
class Beat:
    """Call the heartbeat with the record the next step is decided from; or, with
    `before_call`, the driver's `confirm` that it still owns the run, once a call's
    `tool.started` is durable and before the tool's side effect."""

    record: RunRecord
    before_call: bool = False


@attrs.define
class Append:
    """Append `specs` through `writer` (a `Writer` or `AsyncWriter`, the shell's own), with
    the next step's opening events riding along if `then` gives any (`Writer.append`)."""

    writer: RunWriter
    specs: Sequence[Spec]
    then: Then | None = None


@attrs.define
class Largest:
    """The largest model call so far of `writer`'s run (may read the log once)."""

    writer: RunWriter


@attrs.define
class Ask:
    """Call `agent`'s model with `ctx` and assemble its answer."""

    agent: Agent
    ctx: ModelContext


@attrs.define
class Sleep:
    """Wait `seconds` (a backoff before a retry)."""

    seconds: float


@attrs.define
class Call:
    """Call `tool` with `ctx` (within `ctx.timeout`, if any)."""

    tool: Tool
    ctx: ToolContext


@attrs.define
class Load:
    """Load a run's record; None when it does not exist, unless `required` (then raise)."""

    run_id: str
    required: bool = False


@attrs.define
class Start:
    """Append `event` (a `run.started`) as the first event of a new run."""

    event: m.RunStarted


@attrs.define
class Cancel:
    """Ask for run `run_id` to stop (`control.cancel`), with `reason`."""

    run_id: str
    reason: str


@attrs.define
class Batch:
    """Run the calls of one batch of `writer`'s run: each work's `job(work, stopping)`.

    `stopping()` is the shell's answer to "has the batch been told to stop?" (a sync shell,
    which runs the calls in turn and stops at the first end that is not None, never is).
    """

    writer: RunWriter
    works: tuple[Work, ...]
    job: Callable[[Work, Callable[[], bool]], Job]


@attrs.define
class Refused:
    """An append that did not happen: a guard said no, the run changed, someone else drives
    it, or the lifecycle refused the batch."""

    error: Exception


@attrs.define
class Raised:
    """What a model or a tool raised instead of answering."""

    error: Exception


@attrs.define
class Returned:
    """What a tool returned."""

    value: Any


@attrs.define
class Waiting:
    """A child run waits for a person: its caller's call stays in flight."""

    result: RunResult


@attrs.define
class Later:
    """A failed call's retry is due at `at` (its backoff's end): the drive returns, and its
    driver comes back then (a durable timer) instead of sleeping in the job."""

    at: datetime


Effect = Beat | Append | Largest | Ask | Sleep | Call | Load | Start | Cancel | Batch
T = TypeVar("T")
#: A generator of effects returning `T`: `Steps[RunResult]` is a drive.
Steps = Generator[Effect, Any, T]
#: How one call of a batch ended: None (done), or why the batch must stop or return (an
#: `IllegalTransitionError`: the table has no move for the call's next event, see `_drive`).
End = (
    GuardRejectedError | IllegalTransitionError | StateChanged | RunSupersededError | Waiting
    | Later | None
)  # fmt: skip
#: One call of a batch, as the core runs it.
Job = Generator[Effect, Any, End]


def stops(end: End) -> bool:
    """Whether an end stops the rest of its batch (a waiting child, a retry due later do
    not)."""
    return end is not None and not isinstance(end, Waiting | Later)


def settle(ends: Sequence[End]) -> End:
    """The one end a batch's ends add up to, for the drive loop to act on.

    Superseded beats a refusal, a guard's or the table's (the run is someone else's:
    nothing more is written), which beats a waiting child, which beats a retry due later
    (the earliest); the first refusal counts, the last supersede or wait. A run that changed
    needs nothing more than a new decision (None).
    """
    if not ends:  # the usual batch: every call done
        return None
    superseded = [e for e in ends if isinstance(e, RunSupersededError)]
    if superseded:
        return superseded[-1]
    for end in ends:
        if isinstance(end, GuardRejectedError | IllegalTransitionError):
            return end
    waiting = [e for e in ends if isinstance(e, Waiting)]
    if waiting:
        return waiting[-1]
    later = [e for e in ends if isinstance(e, Later)]
    return min(later, key=lambda e: e.at) if later else None


def appended(got: Any) -> RunRecord:
    """The record an `Append` led to; a refusal is raised again inside the core."""
    if isinstance(got, Refused):
        raise got.error
    record: RunRecord = got
    return record
