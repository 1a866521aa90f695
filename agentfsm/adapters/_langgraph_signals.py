"""The LangGraph adapter's ear: LangChain callbacks turned into our events.

`_Handler` hears the graph a `GraphRun` streams (model and tool callbacks, node starts) and
appends our events through the run's `Recorder`; `approval_request` is the interrupt an
approval node raises, answered from the run's ledger. `agentfsm.adapters.langgraph` is
the public face (`GraphRun`); this module is what it listens with.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.outputs import LLMResult
from langchain_core.tools import ToolException
from langgraph.errors import GraphInterrupt
from langgraph.prebuilt.tool_node import ToolInvocationError
from langgraph.types import Command, interrupt

from agentfsm.adapters._attempts import Attempts
from agentfsm.adapters._recorder import Recorder
from agentfsm.adapters._sdk_stops import CancelStop, GuardStop
from agentfsm.adapters._storable import jsonable, parse_arguments
from agentfsm.adapters._subagents import approved_call, waits_for_person
from agentfsm.errors import AgentFSMError, FinishedCallError, LifecycleError, RunNotFoundError
from agentfsm.events import models as m
from agentfsm.names import ActionStatus, DecisionKind
from agentfsm.runtime._writer import Spec, call_started, declined

SDK = "langgraph"
#: Calls that are decided or waiting to run but have not run (see `_Handler._passed_over`).
_NOT_RUN = frozenset({ActionStatus.PROPOSED, ActionStatus.APPROVED})
#: A call that ran to its end: LangGraph may run it again, we may not (`FinishedCallError`).
_FINISHED = frozenset({ActionStatus.SUCCEEDED, ActionStatus.UNKNOWN})
#: A call a person decided on (see `_Handler.decided`).
_DECIDED = frozenset({ActionStatus.APPROVED, ActionStatus.REJECTED})
#: The marker of an approval interrupt's payload (see `approval_request`).
APPROVAL = "agentfsm.approval"


class RefusedCallError(AgentFSMError, ToolInvocationError):
    """A call of a model answer the run refused (more calls than `max_calls_per_decision`).

    Raised before the tool runs; its message is the refusal's, which the model reads. It is
    a `ToolInvocationError` because that is what `ToolNode` hands to the model by default (a
    call it may not make, as one with invalid arguments); a `ToolNode` told not to handle
    tool errors fails the run instead. It stays here, not in `agentfsm.errors`, because its
    base is LangGraph's (the errors module imports no SDK).
    """

    def __init__(self, run_id: str, action_id: str, message: str) -> None:
        # Not ToolInvocationError's own __init__: it wraps a ValidationError, and there is none
        # (so no `source` either).
        ToolException.__init__(self, message)
        self.message = message
        self.run_id = run_id
        self.action_id = action_id
        self.tool_name = ""
        self.tool_kwargs: dict[str, Any] = {}
        self.filtered_errors = None


def approval_request(tool_calls: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Pause the graph for approval of `tool_calls` (an AIMessage's); returns the decisions.

    Call it inside a node. On resume it returns `{call_id: {"approved": bool, "reason":
    str | None}}` for every call, as decided in our store.

    Our store is where the decisions are: in a graph a `GraphRun` streams, calls its run has
    decided get their decisions from its ledger (checked against the call's arguments
    digest) without another interrupt — so they hold however LangGraph routes resume values
    (a subagent whose interrupt a parallel tool call's hid, say). The calls of an answer the
    run refused (more than `max_calls_per_decision`) are rejected at once, the refusal's
    message their reason: no person is asked about them.

    Raises:
        ApprovalMismatchError: a decided call's arguments are not the ones decided on.
    """
    calls = [{"id": c["id"], "name": c["name"], "args": c["args"]} for c in tool_calls]
    handler = _DRIVING.get()
    decided = handler.decided(calls) if handler is not None else None
    if decided is not None:
        return decided
    decisions: dict[str, dict[str, Any]] = interrupt({"type": APPROVAL, "tool_calls": calls})
    return decisions


#: The handler of the `GraphRun` streaming a graph in this context (see `_Handler.mine`).
_DRIVING: ContextVar[_Handler | None] = ContextVar("agentfsm_langgraph_handler", default=None)


#: LangChain's callback manager logs every error a handler raises as a warning ("Error in
#: _Handler.on_chat_model_start callback: GuardStop(...)") *before* honouring `raise_error`;
#: with `logging` unconfigured, Python's last-resort handler prints that on stderr.
_CALLBACK_LOG = logging.getLogger("langchain_core.callbacks.manager")


class _IntendedStop(logging.Filter):
    """Drops LangChain's warning about the stop `handler` raised on purpose, and only that."""

    def __init__(self, handler: _Handler) -> None:
        super().__init__()
        self.handler = handler

    def filter(self, record: logging.LogRecord) -> bool:
        """False (drop) for "Error in <our handler>.<event> callback: <its stop>"."""
        stop, args = self.handler.stop, record.args
        # The manager logs `(handler class name, event name, repr(error))`: the stop object
        # itself is not on the record, so its repr identifies it; a refused call's error by
        # its class (one per call of a refused answer, each handed to the model); any other
        # error from our handler (a bug) still gets its warning.
        if not (
            isinstance(args, tuple) and len(args) == 3 and args[0] == type(self.handler).__name__
        ):
            return True
        error = str(args[2])
        if error.startswith(f"{RefusedCallError.__name__}("):
            return False
        return not (stop is not None and error == repr(stop))


@contextlib.contextmanager
def quiet_intended_stops(handler: _Handler) -> Iterator[None]:
    """While a `GraphRun` streams: a guard's or a cancel's stop is a result, not an error.

    The filter sits on LangChain's logger only for the stream's duration, so nothing
    outside a run (nor another library's callbacks) is affected.
    """
    quiet = _IntendedStop(handler)
    _CALLBACK_LOG.addFilter(quiet)
    try:
        yield
    finally:
        _CALLBACK_LOG.removeFilter(quiet)


class _Handler(BaseCallbackHandler):
    """LangChain callbacks appending our events (see the module docstring)."""

    raise_error = True  # a guard's stop must stop the graph, not be logged and dropped

    def __init__(self, recorder: Recorder, agents: frozenset[str]) -> None:
        self.recorder = recorder
        self.agents = agents
        self.tool_runs: dict[UUID, str] = {}
        #: Model calls made through `with_structured_output` (their tool call is the output).
        self.structured: set[Any] = set()
        self.last_output: Any = None
        #: A stop raised from a callback; a node that catches errors (`ToolNode(...,
        #: handle_tool_errors=True)`) would swallow it, so every later callback raises it again.
        self.stop: GuardStop | CancelStop | None = None
        #: The LangChain run id of the graph being streamed: its children are the node runs.
        self.graph_run: UUID | None = None
        #: The call delegating from each task of the graph (see `GraphRun._one_per_task`).
        self.delegating: dict[str, str] = {}
        #: The agent node in charge: the run's `current_agent`, or the first agent node
        #: entered when the run names none (entering it is no handoff).
        self.agent: str | None = None
        #: The `ToolMessage` each call of the batch returned, what the model reads of it.
        self.returned: dict[str, ToolMessage] = {}
        #: Each HTTP attempt of the run's model calls, judged and recorded (`watching`); a
        #: stop raised for one is kept as any callback's (`stop`).
        self.attempts = Attempts(recorder, stopping=self._stopped)

    def _stopped(self, stop: GuardStop | CancelStop) -> GuardStop | CancelStop:
        self.stop = stop
        return stop

    def begin(self) -> None:
        """Get ready to observe one stream of the graph (a run or a resume)."""
        self.stop = None
        self.graph_run = None
        self.agent = self.recorder.record.current_agent

    def mine(self) -> bool:
        """Whether the signal being handled belongs to this handler's run.

        LangChain hands a runnable's callbacks down to every runnable invoked inside it,
        so a subagent graph streamed from a tool reaches its parent's handler too (it would
        record the child's model calls in the parent run, which waits for the tool). Each
        `GraphRun` marks the context it streams in; LangGraph and LangChain copy the context
        into their worker threads, tasks and executor-run callbacks, so a signal is this
        run's exactly when the innermost stream around it is this run's.
        """
        return _DRIVING.get() is self

    def _append(self, signal: str, specs: list[Any]) -> None:
        if self.stop is not None:
            raise self.stop
        try:
            self.recorder.append(signal, specs)
        except (GuardStop, CancelStop) as stop:
            self.stop = stop
            raise

    def on_chain_start(
        self,
        serialized: dict[str, Any],
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """The graph or a node started: entering another agent node is a `handoff`."""
        if not self.mine():
            return
        if self.graph_run is None:
            self.graph_run = run_id  # the stream's first chain is the graph itself
            return
        # Only the graph's own node runs: chains nested in a node (a subgraph's nodes, a
        # routing function, a prompt | model sequence) carry the node's metadata too.
        if parent_run_id != self.graph_run or not self.agents:
            return
        node = (metadata or {}).get("langgraph_node")
        if node not in self.agents or node == self.agent:
            return
        if self.agent is not None:
            self._append(f"on_chain_start (node '{node}')", [Spec(m.Handoff, {"to_agent": node})])
        self.agent = node

    def _model_started(self, name: str) -> None:
        self.returned.clear()  # a new batch comes of this call
        try:
            self._append(
                f"on_chat_model_start ({name})",
                [*self._passed_over(), self.recorder.model_call()],
            )
        except LifecycleError as exc:
            if self.recorder.record.model_call_open:
                exc.add_note(
                    "LangGraph ran model calls at once (parallel branches, Send): a run has "
                    "one model call at a time; run each branch as a subagent of its own "
                    "(subagent('<branch>').run(...) from its node, or a tool that delegates)"
                )
            raise

    def _passed_over(self) -> list[Any]:
        """Calls the graph went on without running, each recorded as declined by the graph.

        A router that reads a tool call to pick the next node (and never runs it) is
        ordinary LangGraph, and so is an approval node that sends the model only the
        rejections of a batch, leaving its approved calls unrun. The model is about to be
        called again, so those calls will not run: they are recorded as asked (again) and
        declined (approver `langgraph`), as a policy denial is, so the ledger says why.
        """
        record = self.recorder.record
        specs: list[Any] = []
        for aid in record.batch:
            action = record.actions[aid]
            if action.status not in _NOT_RUN:
                continue
            reason = "the graph went on without running this call"
            specs += declined(aid, action.tool, action.arguments, SDK, reason)
        return specs

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[Any]], **kwargs: Any
    ) -> None:
        """A chat model call is about to start: `model.started`."""
        if not self.mine():
            return
        if (kwargs.get("options") or {}).get("ls_structured_output_format"):
            # `with_structured_output`: the answer's tool call *is* the output, not an action.
            self.structured.add(kwargs.get("run_id"))
        self._model_started(str((serialized or {}).get("name", "chat model")))

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], **kwargs: Any) -> None:
        """A text model call is about to start: `model.started`."""
        if not self.mine():
            return
        self._model_started(str((serialized or {}).get("name", "llm")))

    def on_llm_end(self, response: LLMResult, **kwargs: Any) -> None:
        """The model answered: `model.completed` with its decision and usage."""
        if not self.mine():
            return
        generation = response.generations[0][0]
        message = getattr(generation, "message", None)
        usage = None
        calls: list[dict[str, Any]] = []
        text: Any = generation.text
        if isinstance(message, AIMessage):
            calls = [
                {"action_id": c["id"], "tool": c["name"], "arguments": jsonable(c["args"])}
                for c in message.tool_calls
            ]
            if message.usage_metadata:
                model = message.response_metadata.get("model_name")
                usage = self.recorder.reported_usage(
                    message.usage_metadata["input_tokens"],
                    message.usage_metadata["output_tokens"],
                    model if isinstance(model, str) else None,
                )
            text = message.text
        if kwargs.get("run_id") in self.structured:
            self.structured.discard(kwargs.get("run_id"))
            output = calls[0]["arguments"] if calls else jsonable(text)
            fields: dict[str, Any] = {"decision": DecisionKind.FINAL, "output": output}
            self.last_output = output
        elif calls:
            fields = {"decision": DecisionKind.TOOL_CALLS, "tool_calls": calls}
        else:
            fields = {"decision": DecisionKind.FINAL, "output": jsonable(text)}
            self.last_output = fields["output"]
        self._append("on_llm_end", [Spec(m.ModelCompleted, {**fields, "usage": usage})])

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        """A tool is about to run: `tool.requested` + `tool.started`."""
        if not self.mine():
            return
        aid = kwargs.get("tool_call_id")
        if not aid:
            return  # a tool invoked outside a model's tool call: not an action of the run
        refusal = self.recorder.refusal(aid)
        if refusal is not None:  # a call of a refused answer: it never runs, the model reads why
            raise RefusedCallError(self.recorder.run_id, aid, refusal.message)
        self.tool_runs[run_id] = aid
        action = self.recorder.record.actions.get(aid)
        if action is not None and action.status == ActionStatus.STARTED:
            return  # it waited on its subagent, and runs again to resume it (`delegate`)
        if action is not None and (
            action.status in _FINISHED
            or (action.status == ActionStatus.FAILED and not _retryable(action))
        ):
            # The node re-runs from its start on resume, so its finished calls would run
            # (and act) a second time: refused before the tool runs.
            raise FinishedCallError(self.recorder.run_id, aid, action.status)
        if action is not None and action.status == ActionStatus.FAILED:
            # A tool that called interrupt() runs again from its start on resume: its next
            # attempt (the interrupt was recorded as a retryable failure).
            attempt = {"action_id": aid, "attempt": action.attempts + 1}
            self._append(f"on_tool_start (call '{aid}', again)", [Spec(m.ToolStarted, attempt)])
            return
        name = str((serialized or {}).get("name") or kwargs.get("name"))
        args = jsonable(inputs) if inputs is not None else parse_arguments(input_str)
        self._append(f"on_tool_start (call '{aid}')", call_started(aid, name, args))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool returned: `tool.completed`."""
        if not self.mine():
            return
        aid = self.tool_runs.pop(run_id, None)
        if aid is None:
            return
        self.last_output = _tool_result(output, aid)
        if isinstance(output, ToolMessage):
            self.returned[aid] = output
        self._append(
            f"on_tool_end (call '{aid}')",
            [Spec(m.ToolCompleted, {"action_id": aid, "result": self.last_output})],
        )
        self._tell_refused()

    def _tell_refused(self) -> None:
        """A proposal the table refused once the batch was resolved (after its tool had
        returned) is told with the call's result: the `ToolMessage` the graph has not yet
        put in its state (the tool node returns once the batch's tools have) says why.

        The model node is the graph's own, so the model's next input cannot be added to
        here; the result of the call that proposed the event is what it reads of that call.
        """
        for aid, sentence in self.recorder.refused_untold().items():
            message = self.returned.pop(aid, None)
            if message is None:
                continue
            if isinstance(message.content, str):
                message.content = f"{message.content}\n\n{sentence}"
            else:
                message.content = [*message.content, {"type": "text", "text": sentence}]
            self.recorder.told(aid)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        """A tool raised: `tool.failed`."""
        if not self.mine():
            return
        aid = self.tool_runs.pop(run_id, None)
        if aid is None or isinstance(error, GuardStop | CancelStop):
            return
        if isinstance(error, GraphInterrupt) and self._subagent_waits(aid):
            return  # the call waits on its subagent, whose interrupt pauses this graph too
        if isinstance(error, GraphInterrupt):
            # interrupt() inside the tool: the graph pauses, and on resume LangGraph runs the
            # tool again from its start. This attempt ends here, retryably.
            failure: dict[str, Any] = {
                "kind": "interrupted",
                "message": "the tool called interrupt(); it runs again when the graph resumes",
                "retryable": True,
            }
        else:
            failure = {"kind": type(error).__name__, "message": str(error)}
        self._append(
            f"on_tool_error (call '{aid}')",
            [Spec(m.ToolFailed, {"action_id": aid, "error": failure})],
        )

    def decided(self, calls: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]] | None:
        """The run's decisions on every one of `calls`, or None while any is undecided."""
        record = self.recorder.record
        decisions: dict[str, dict[str, Any]] = {}
        for call in calls:
            refusal = self.recorder.refusal(call["id"])
            if refusal is not None:  # of a refused answer: never put to a person
                decisions[call["id"]] = {"approved": False, "reason": refusal.message}
                continue
            action = record.actions.get(call["id"])
            if action is None or action.status not in _DECIDED:
                return None
            approved_call([record], call["id"], call["name"], jsonable(call["args"]))
            approved = action.status == ActionStatus.APPROVED
            decisions[action.action_id] = {"approved": approved, "reason": action.reason}
        return decisions

    def _subagent_waits(self, aid: str) -> bool:
        """Whether call `aid` started a subagent run that waits for a person (or below it)."""
        store = self.recorder.store
        try:
            child = store.load(f"{self.recorder.run_id}/{aid}")
        except RunNotFoundError:
            return False
        return waits_for_person(store, child)


def _retryable(action: Any) -> bool:
    """Whether a failed call may run again (an `interrupt()` ended its attempt)."""
    return action.error is not None and bool(action.error.retryable)


def _tool_result(output: Any, action_id: str) -> Any:
    """What the tool of call `action_id` returned, as JSON data.

    A `ToolMessage`'s content; for a `Command` (a handoff tool's `Command(goto=...)`), the
    content of the `ToolMessage` it adds for the call, else where it goes.
    """
    if isinstance(output, ToolMessage):
        return jsonable(output.content)
    if isinstance(output, Command):
        update = output.update
        messages = update.get("messages", ()) if isinstance(update, dict) else ()
        for message in messages if isinstance(messages, list | tuple) else (messages,):
            if isinstance(message, ToolMessage) and message.tool_call_id == action_id:
                return jsonable(message.content)
        return {"goto": jsonable(output.goto)}
    return jsonable(output)
