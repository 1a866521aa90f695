"""Every HTTP attempt of a model call, judged by the guards and recorded (issue 31, item 3).

The `openai` client under the OpenAI Agents SDK, pydantic-ai's `OpenAIChatModel` and
LangChain's `ChatOpenAI` retries a failed request (an error status it deems transient: 408,
409, 429, 5xx; a timeout; a lost connection) twice by default, with backoff, *inside* the
one call the SDK above it makes; the Agents SDK can retry a model call itself as well
(`ModelSettings(retry=...)`), inside one `on_llm_start`. Seen from the SDK's signals, three
HTTP attempts were one model call: the guards judged the first only, while the deadline
passed and the attempts cost time (and, for an attempt lost after it was sent, tokens).

So while an adapter drives a run (`watching`), each request the `openai` client sends to a
model endpoint (`.../chat/completions`, `.../responses`, `.../completions`) in the run's
context is an attempt of the model call the adapter recorded last:

- the first attempt goes out under the SDK's `model.started`, as before;
- a failed attempt ends that call: `model.failed` with what went wrong (`http_503`, an
  exception's class name; `retryable` as the client judges it), before the client's backoff;
- the client's next attempt is a model call of its own: `model.started` (reserving what the
  run reserves per call), judged by the guards *before the request is sent* — a deadline
  passed during the backoff, `max_turns` (which so counts attempts), a budget that cannot
  hold the reservation, a cancel asked meanwhile: each stops the run there, and the client
  does not retry the stop (it retries only its own transport errors);
- the attempt that answers is the call the SDK's `model.completed` ends, as before;
- an attempt lost after its request was sent (a read timeout, a dropped connection) may have
  spent tokens nobody will report: on a run under a budget that is usage missing, and the
  run stops before the retry (`run.terminated`, `budget`), as for an answer without usage
  (`agentfsm.runtime._metering`). One that never reached the server (a connect error or
  timeout, no free connection) spent nothing, and is retried;
- the SDK sending the request again after an answer (HTTP 2xx) it did not use is the same:
  the answer's attempt is `model.failed` (`resent`), and the resend a call of its own.

A request outside any model call the run recorded (a tool's own client, a node calling the
client directly) is left alone.

The same decisions serve the Claude adapter's loopback gateway (`_claude_gateway`), which sees
each request the `claude` CLI sends and opens every model call itself (`opens=True`: its
first attempt is a `model.started` of `opening` too); what failed is seen there (an error
status, an `error` event in the stream, a stream broken off), with the usage it reported.

What this does to your client: nothing to the object, its settings or its `http_client`. The
`openai` client classes' `_send_request` (the one method each HTTP attempt of theirs goes
through) is wrapped once, the first time an adapter drives a run in the process; outside the
context of a run an adapter drives, the wrapper calls the original and does nothing else.
Your `max_retries`, timeouts, proxies and event hooks apply as they did.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from agentfsm._log import get_logger
from agentfsm.adapters._recorder import Recorder
from agentfsm.adapters._sdk_stops import CancelStop, GuardStop
from agentfsm.errors import OverrunError
from agentfsm.events import models as m
from agentfsm.names import EventType, StopReason
from agentfsm.runtime._metering import MISSING_USAGE
from agentfsm.runtime._writer import Spec

__all__ = ["Attempts", "Step", "lost", "refused", "watching"]

#: The attempts of the run an adapter drives in this context (see `watching`).
_WATCH: ContextVar[Attempts | None] = ContextVar("agentfsm_model_attempts", default=None)

#: The ends of the paths a model request is sent to.
_MODEL_PATHS = ("/chat/completions", "/responses", "/completions")

#: Transport errors raised before a request could reach the server: it spent nothing. By
#: class name, as `httpx` and `httpx2` (either may be under the client) name them alike.
_NOT_SENT = frozenset({"ConnectError", "ConnectTimeout", "PoolTimeout"})
#: The transport errors the client retries (and their subclasses).
_TRANSPORT = frozenset({"RequestError", "TimeoutException"})

#: Marks our wrapper on a client class, so it is installed once.
_MARK = "__agentfsm_attempts__"
_INSTALL = threading.Lock()

#: The longest message a failed attempt records of the server's answer.
_MESSAGE = 300

#: Turns an adapter's stop into what it raises through its SDK (the Agents SDK's carrier).
Stopping = Callable[[GuardStop | CancelStop], BaseException]


def _same(stop: GuardStop | CancelStop) -> BaseException:
    return stop


class Attempts:
    """The HTTP attempts of one run's model calls (see the module docstring).

    Args:
        recorder: the run's recorder.
        stopping: what to raise for a stop (default: the stop itself).
        source: who sends the requests, naming the signal of each event.
        retrier: who retries, in a stop's detail.
        opens: whether the first attempt of a call opens it here (a `model.started` of
            `opening`), as the Claude gateway's do; else the SDK's own `model.started` does.
    """

    def __init__(
        self,
        recorder: Recorder,
        stopping: Stopping = _same,
        *,
        source: str = "openai client",
        retrier: str = "client",
        opens: bool = False,
    ) -> None:
        self.recorder = recorder
        self._stopping = stopping
        self.source = source
        self.retrier = retrier
        self.opens = opens
        #: The turn whose call an attempt was sent under (a second request under it is the
        #: SDK sending it again), and which attempt of the SDK's call that was.
        self._sent: int | None = None
        self._attempt = 0
        #: The run's version after the `model.failed` we recorded: a request while it still
        #: is is that call's retry (anything recorded since means the SDK moved on).
        self._failed_at: int | None = None
        #: A stop raised for an attempt: every later attempt of the run raises it again (the
        #: SDK may retry what it does not know is a stop).
        self.stop: BaseException | None = None

    # -- what to append, decided from the record ----------------------------------------------

    def opening(self, path: str) -> list[Step]:
        """What to append before an attempt to `path` is sent: nothing for the first attempt
        of the call the SDK started (or for a request outside any call of the run); with
        `opens`, the first attempt's `model.started`."""
        record = self.recorder.record
        if record.model_call_open:
            if self._sent != record.turn:  # the first attempt of the SDK's own call
                self._sent, self._attempt = record.turn, 1
                return []
            # Sent again under the same call, no failure seen: its answer was not used, and
            # may have cost what it reported to nobody.
            resent = self.failure(
                path,
                "resent",
                "the request was sent again after an answer that was not used",
                retryable=True,
                spent=True,
            )
            return [resent, self._call(path, retry=True)]
        if self._failed_at is not None and self._failed_at == record.version:
            return [self._call(path, retry=True)]
        return [self._call(path, retry=False)] if self.opens else []

    def _call(self, path: str, *, retry: bool) -> Step:
        attempt = self._attempt + 1 if retry else 1
        signal = f"{self.source}: POST {path}"
        if retry:
            signal += f", attempt {attempt} of the model call"
        return Step(signal, self.recorder.model_call(), spent=False, attempt=attempt)

    def failure(
        self,
        path: str,
        kind: str,
        message: str,
        retryable: bool,
        spent: bool,
        usage: dict[str, Any] | None = None,
    ) -> Step:
        """The `model.failed` of the open call's attempt: `spent` when it may have cost what
        nobody reported (under a budget `after` then stops the run); `usage` what it did
        report."""
        error = {"kind": kind, "message": message[:_MESSAGE], "retryable": retryable}
        fields: dict[str, Any] = {"error": error}
        if usage is not None:
            fields["usage"] = usage
        signal = f"{self.source}: POST {path}, attempt {self._attempt} failed ({kind})"
        return Step(signal, Spec(m.ModelFailed, fields), spent=spent, attempt=self._attempt)

    def after(self, step: Step) -> GuardStop | None:
        """Note what `step` appended; the stop it calls for, if any."""
        record = self.recorder.record
        if step.spec.cls is m.ModelStarted:  # the next attempt goes out under this call
            self._sent = record.turn
            self._attempt = step.attempt
            self._failed_at = None
            return None
        self._failed_at = record.version
        under = self.recorder.budgeted() if step.spent else None
        if under is None:
            return None
        detail = (
            f"{MISSING_USAGE}: attempt {self._attempt} of the model call got no usable answer "
            f"after its request was sent, so what it spent is unknown and {under} cannot be "
            f"checked; the {self.retrier}'s retry was not sent (docs/adapters.md, 'Retries')"
        )
        return GuardStop(
            OverrunError(
                guard=StopReason.BUDGET,
                stop_reason=StopReason.BUDGET,
                detail=detail,
                run_id=record.run_id,
                sequence=record.version,
                state=record.status,
                event=EventType.MODEL_FAILED,
            )
        )

    def _raise(self, stop: GuardStop | CancelStop) -> BaseException:
        self.stop = raised = self._stopping(stop)
        return raised

    def _mine(self, path: str) -> bool:
        if self.stop is not None:
            raise self.stop
        return path.endswith(_MODEL_PATHS)

    def _in_call(self) -> bool:
        """Whether the attempt about to be sent is one of a model call the run recorded."""
        return self.recorder.record.model_call_open and self._sent == self.recorder.record.turn

    # -- the two shells: the client's sync and async send -------------------------------------

    def _apply(self, step: Step) -> None:
        try:
            self.recorder.append(step.signal, [step.spec])
            over = self.after(step)
        except (GuardStop, CancelStop) as stop:
            raise self._raise(stop) from stop
        if over is not None:
            raise self._raise(over) from None

    async def _aapply(self, step: Step) -> None:
        try:
            await self.recorder.aappend(step.signal, [step.spec])
            over = self.after(step)
        except (GuardStop, CancelStop) as stop:
            raise self._raise(stop) from stop
        if over is not None:
            raise self._raise(over) from None

    def send(self, client: Any, request: Any, original: Callable[[], Any]) -> Any:
        """One attempt of a sync client (`original()` sends it)."""
        path = request.url.path
        if not self._mine(path):
            return original()
        for step in self.opening(path):
            self._apply(step)
        if not self._in_call():
            return original()
        try:
            response = original()
        except Exception as exc:
            self._apply(self.failure(path, *lost(exc)))
            raise
        if response.status_code >= 400:
            response.read()
            self._apply(self.failure(path, *refused(client, response)))
        return response

    async def asend(self, client: Any, request: Any, original: Callable[[], Any]) -> Any:
        """One attempt of an async client (`await original()` sends it)."""
        path = request.url.path
        if not self._mine(path):
            return await original()
        for step in self.opening(path):
            await self._aapply(step)
        if not self._in_call():
            return await original()
        try:
            response = await original()
        except Exception as exc:
            await self._aapply(self.failure(path, *lost(exc)))
            raise
        if response.status_code >= 400:
            await response.aread()
            await self._aapply(self.failure(path, *refused(client, response)))
        return response


@dataclass(frozen=True)
class Step:
    """One event to append about an attempt: whether it may have spent what nobody
    reported, and which attempt of the model call it is about."""

    signal: str
    spec: Spec
    spent: bool
    attempt: int = 1


def lost(exc: Exception) -> tuple[str, str, bool, bool]:
    """kind, message, retryable (the client retries it), spent (it may have reached the
    server) of an attempt that raised `exc` instead of answering."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    sent = not names & _NOT_SENT
    where = "after its request was sent" if sent else "before its request reached the server"
    return (
        type(exc).__name__,
        f"no answer {where}: {exc}" if str(exc) else f"no answer {where}",
        bool(names & _TRANSPORT),
        sent,
    )


def refused(client: Any, response: Any) -> tuple[str, str, bool, bool]:
    """kind, message, retryable, spent of an attempt the server answered with an error."""
    status = response.status_code
    detail = response.text
    with contextlib.suppress(ValueError, AttributeError, TypeError):
        error = json.loads(detail)["error"]
        detail = error["message"] if isinstance(error, dict) else str(error)
    reason = f" {response.reason_phrase}" if response.reason_phrase else ""
    message = f"HTTP {status}{reason}: {detail}" if detail else f"HTTP {status}{reason}"
    # The client's own rule (statuses, `x-should-retry`), as it decides whether to retry;
    # without one (the Claude gateway's client), the rule the `openai` and `anthropic`
    # clients share, which the `claude` CLI follows too (529, overloaded, is a 5xx).
    should = getattr(client, "_should_retry", None)
    if should is not None:
        retry = bool(should(response))
    elif (header := response.headers.get("x-should-retry")) in ("true", "false"):
        retry = header == "true"
    else:
        retry = status in (408, 409, 429) or status >= 500
    return f"http_{status}", message, retry, False


@contextlib.contextmanager
def watching(attempts: Attempts) -> Iterator[Attempts]:
    """Judge and record the model requests the `openai` client sends in this context (and
    the tasks and threads it is copied into) as attempts of `attempts`' run."""
    _install()
    attempts.stop = None  # a stop of an earlier drive (a wait it resumes from) is over
    token = _WATCH.set(attempts)
    try:
        yield attempts
    finally:
        _WATCH.reset(token)


def _install() -> None:
    """Wrap the `openai` clients' `_send_request` once (nothing to do without `openai`)."""
    try:
        from openai import _base_client
    except ImportError:
        return
    with _INSTALL:
        for cls, wrap in (
            (_base_client.SyncAPIClient, _sync_wrapper),
            (_base_client.AsyncAPIClient, _async_wrapper),
        ):
            current = cls.__dict__.get("_send_request")
            if current is None:
                # Another `openai` than the one we know: say so rather than go on unseen.
                get_logger().warning(
                    "attempts.unwatched",
                    client=cls.__qualname__,
                    reason="the openai client has no _send_request to watch; its retries "
                    "stand behind one model call",
                )
                continue
            if not getattr(current, _MARK, False):
                setattr(cls, "_send_request", wrap(current))  # noqa: B010 - a method, set on purpose


def _sync_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    def _send_request(self: Any, request: Any, *, stream: bool, **kwargs: Any) -> Any:
        attempts = _WATCH.get()
        if attempts is None:
            return original(self, request, stream=stream, **kwargs)
        return attempts.send(
            self, request, lambda: original(self, request, stream=stream, **kwargs)
        )

    setattr(_send_request, _MARK, True)
    _send_request.__wrapped__ = original  # type: ignore[attr-defined]
    return _send_request


def _async_wrapper(original: Callable[..., Any]) -> Callable[..., Any]:
    async def _send_request(self: Any, request: Any, *, stream: bool, **kwargs: Any) -> Any:
        attempts = _WATCH.get()
        if attempts is None:
            return await original(self, request, stream=stream, **kwargs)
        return await attempts.asend(
            self, request, lambda: original(self, request, stream=stream, **kwargs)
        )

    setattr(_send_request, _MARK, True)
    _send_request.__wrapped__ = original  # type: ignore[attr-defined]
    return _send_request
