"""Run a LangGraph graph under our lifecycle: validated, guarded, stored, logged.

`GraphRun(store, run_id, guards=[...]).run(graph, input, config)` streams the compiled graph
(`stream_mode="updates"`) with a LangChain callback handler that turns the signals of the
chat models and tools inside it into our events, appended through the store as they happen:

- before the stream: `run.started`;
- `on_chat_model_start` / `on_llm_start`: `model.started` (max turns, budget, deadline); each
  HTTP attempt a `ChatOpenAI`'s `openai` client retries behind it: `model.failed` for the
  attempt that failed, then `model.started` for the retry, judged before it is sent
  (`agentfsm.adapters._attempts`);
- `on_llm_end`: `model.completed` with the message's `usage_metadata`; its `tool_calls`
  become our tool calls with the model's call ids as `action_id`s (a `with_structured_output`
  call's tool call is the answer instead: a `final` decision with the arguments as output);
  a message with more calls than `max_calls_per_decision` is `refused`: `approval_request`
  rejects its calls at once and `on_tool_start` raises `RefusedCallError` for each before
  it runs, the refusal's message what the model reads (`ToolNode` hands it over);
- `on_tool_start`: `tool.requested` + `tool.started`; `on_tool_end`: `tool.completed`;
  `on_tool_error`: `tool.failed` (whether or not `ToolNode` hands the error to the model; an
  `interrupt()` inside the tool is a retryable failure of that attempt: LangGraph runs the
  tool again from its start on resume, recorded as its next `tool.started`);
- an `interrupt(approval_request(calls))` in a node: `approval.requested` per call (any
  other `interrupt()` is `run.paused`): a pause, never a failure;
- `on_chain_start` of one of the graph's own nodes named in `agents` that is not the run's
  current agent: `handoff` (`to_agent` = the node's name);
- the stream ends with nothing pending: `run.completed`;
- `GraphRecursionError`: `run.terminated` (`max_turns`); other exceptions: `run.failed`.

Handoffs: LangGraph has no handoff signal; an agent is a node, and the graph moves between
nodes by edges, conditional edges or `Command(goto=...)`. So `GraphRun(..., agents=[...])`
names the nodes that are agents, and entering one records `handoff` — whatever routed
there. Only the graph's own nodes count (the chains whose parent is the graph's run: a
node's nested chains carry its `langgraph_node` metadata too), so an agent may be a
subgraph. The first agent node entered while the run names no agent (`run(agent=...)`
unset) becomes the current one without a handoff; entering the current agent again is none.
Name the entry agent with `run(agent=...)`: our log then knows who is in charge, also when
a later `drive` (a new stream) enters its first agent node.
A handoff tool (`transfer_to_billing` returning `Command(goto="billing")`, the
langgraph-swarm/supervisor way) stays what LangGraph made it, a tool call: the model's
decision is `tool_calls`, the call is `tool.requested` … `tool.completed` (its result is
the `ToolMessage` the command adds), then entering the node is the `handoff`. We do not
guess handoff tools from their names: the tool runs code, may fail (then there is no
handoff and its failure is recorded), and its message is in the conversation.

Subagents: a tool (run by `ToolNode`, its call id from `InjectedToolCallId`) may stream
another graph as a run of its own, `graph_run.subagent(tool_call_id).run(other, input)`:
id `<run_id>/<call_id>`, same store, guards, clock, logger and listeners, and this run's
token and cost limits shared by both through one budget tree (a child that would overspend
it is stopped for `budget`, then this run's next model call). LangChain hands a runnable's
callbacks down to everything invoked inside it, so this run's handler also hears the
child's model and tool calls; each handler records only the signals of the stream it
drives (a context variable set around `graph.stream`/`astream`, which LangGraph and
LangChain copy into their worker threads, tasks and executor-run callbacks), so the child's
calls are the child's only — also for parallel tool calls, each in its own thread.
`graph_run.delegate(tool_call_id, other, input)` runs the child and returns what the model
reads; a child compiled without a checkpointer of its own is a nested subgraph whose
interrupt (approvals, `interrupt()`) pauses this graph too, recorded in the child's run,
and this run's `drive` continues both (see `GraphRun.delegate`).

The handler sets `raise_error = True`, so a guard's refusal raised from it stops the graph;
the adapter then records `run.terminated` and returns the partial output. LangChain logs
every error a callback raises as a warning before re-raising it; for the stop a guard or a
cancel raised on purpose, that warning is dropped (`quiet_intended_stops`), so an intended
stop prints nothing. Approvals are
decided in our store (`agentfsm.runtime.approve`/`reject`, any process); `drive(graph,
config)` then resumes the graph from its checkpointer with `Command(resume={call_id:
{"approved": bool, "reason": str | None}})`, after checking that the interrupted calls are
exactly the ones approval was requested for (call id and arguments digest): else
`ApprovalMismatchError` and nothing runs.

Turns: LangGraph's `recursion_limit` counts super-steps (every node execution round: model,
tools, approval and your own nodes), not model calls. Our `max_turns` counts model calls
(`model.started`); a graph with a model node and a tool node takes about two super-steps
per model turn. Both may be set; either stop ends as `run.terminated` / `max_turns`.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Collection, Sequence
from typing import Any, Unpack

from agentfsm._extras import missing_extra

# The extra's packages first, so a missing one is reported by the extra's name.
try:
    from langchain_core.callbacks import BaseCallbackManager
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.config import get_config
    from langgraph.types import Command
except ImportError as exc:
    raise missing_extra("GraphRun", "langgraph", exc) from exc

from agentfsm.adapters._attempts import watching
from agentfsm.adapters._langgraph_approvals import NeedsApproval, approval_node
from agentfsm.adapters._langgraph_interrupts import ended, finish, resume_command
from agentfsm.adapters._langgraph_signals import (
    _DRIVING,
    APPROVAL,
    SDK,
    RefusedCallError,
    _Handler,
    approval_request,
    quiet_intended_stops,
)
from agentfsm.adapters._observed import ObservedRun
from agentfsm.adapters._pricing import Pricing, per_million_tokens, price_table
from agentfsm.adapters._sdk_run import RunOptions, SdkRun, aleased, leased
from agentfsm.adapters._subagents import (
    stopped_line,
)
from agentfsm.errors import (
    ApprovalMismatchError,
    FinishedCallError,
    SignalIllegalTransitionError,
    UnknownModelError,
)
from agentfsm.events.models import Limits
from agentfsm.names import RunStatus
from agentfsm.stores.base import EventStore

__all__ = [
    "APPROVAL",
    "ApprovalMismatchError",
    "FinishedCallError",
    "GraphRun",
    "NeedsApproval",
    "ObservedRun",
    "Pricing",
    "RefusedCallError",
    "SignalIllegalTransitionError",
    "UnknownModelError",
    "approval_node",
    "approval_request",
    "per_million_tokens",
    "price_table",
]


class GraphRun(SdkRun):
    """One of our runs, driven by a compiled LangGraph graph (see the module docstring).

    Args:
        store: any of our `EventStore`s.
        run_id: our id for the run.
        guards: Python guards checked on every signal (`MaxTurns`, `Budget`, ...).
        clock: stamps events and is the guards' `now` (UTC wall clock by default).
        logger: a structlog logger for the transition log lines.
        listeners: called with each stored event, in order (`RunSpans(tracer).feed`).
        reserve_tokens: tokens each model call reserves before it is made (see `SdkRun`).
        reserve_cost: cost each model call reserves before it is made.
        pricing: the cost of a model call from its tokens (see `SdkRun`).
        max_calls_per_decision: the calls one model answer may propose (64 by default; see
            `SdkRun`): the calls of an answer with more are refused, the model reads why.
        max_turns: the model calls a run may make (100 by default; see `SdkRun`).
        agents: the names of the graph's nodes that are agents: entering one that is not
            the run's current agent records `handoff` (none given: no handoffs).
        stream_mode: what to stream to `on_chunk`, as LangGraph's own `stream_mode`
            ("messages" for a UI's tokens, "custom", "values", ... or a list of them).
        on_chunk: called with each chunk of `stream_mode`, shaped as `graph.stream` would
            yield it (the chunk for one mode, `(mode, chunk)` for a list); `arun` and
            `adrive` await it if it returns an awaitable.

    Raises:
        TypeError: `agents` is a single string, not a collection of node names.
        ValueError: `stream_mode` without `on_chunk` (nothing would receive it).
    """

    sdk = SDK
    #: The graph's agent nodes (see `agents` above); a `subagent` run's has none.
    agents: frozenset[str] = frozenset()
    #: What the caller streams (see above); a `subagent` run streams nothing.
    stream_mode: str | tuple[str, ...] | None = None
    on_chunk: Callable[[Any], Any] | None = None

    def __init__(
        self,
        store: EventStore,
        run_id: str,
        *,
        agents: Collection[str] = (),
        stream_mode: str | Sequence[str] | None = None,
        on_chunk: Callable[[Any], Any] | None = None,
        **options: Unpack[RunOptions],
    ) -> None:
        if isinstance(agents, str):
            # A string is a collection of characters: "triage" would name six agents.
            raise TypeError(f"agents must be a collection of node names, not the string {agents!r}")
        if stream_mode is not None and on_chunk is None:
            raise ValueError(f"stream_mode={stream_mode!r} needs on_chunk to receive the chunks")
        self.agents = frozenset(agents)
        if on_chunk is not None:
            self.on_chunk = on_chunk
            mode = stream_mode if stream_mode is not None else "updates"
            self.stream_mode = mode if isinstance(mode, str) else tuple(mode)
        super().__init__(store, run_id, **options)

    def _attach(self) -> None:
        self.handler = _Handler(self.recorder, self.agents)

    @leased
    def run(
        self,
        graph: Any,
        input: Any,
        config: dict[str, Any] | None = None,
        *,
        objective: str | None = None,
        agent: str | None = None,
        limits: Limits | None = None,
    ) -> ObservedRun:
        """Start the run and stream `graph` on `input` under our lifecycle.

        Args:
            graph: a compiled graph (`StateGraph(...).compile(...)`).
            input: the graph's input.
            config: the graph's config (`thread_id`, `recursion_limit`, ...).
            objective: the run's objective, recorded on `run.started`.
            agent: the agent's name, recorded on `run.started`.
            limits: the run's own limits, recorded on `run.started` and enforced.
        """
        self.recorder.start(objective=objective, agent=agent, limits=limits)
        return self._leg(graph, input, config)

    @leased
    def drive(self, graph: Any, config: dict[str, Any], value: Any = None) -> ObservedRun:
        """Continue a paused run from the graph's checkpointer (any process).

        A run waiting for approval resumes with the decisions stored in our store (`value`
        is ignored); a run paused by another `interrupt()` records `run.resumed` and resumes
        with `value`. Calls still undecided leave the run waiting (nothing runs); a run
        asked to cancel while it waited ends cancelled here, and nothing runs; a run that
        already ended is returned as it is (as `Runner.drive` does).

        A run an event of its lifecycle made wait (a tool's `emit`) goes on from the
        graph's checkpoint once a person's event let it (and is returned as it is while it
        still waits); a graph whose state keeps a `messages` conversation gets a user
        message first saying which events were appended meanwhile, and their fields.

        Raises:
            ApprovalMismatchError: the graph's interrupted calls are not the ones approval
                was requested for.
        """
        state = graph.get_state(config)
        command = self._resume_command(state.interrupts, value)
        if isinstance(command, ObservedRun):
            return command
        if command is None:  # on from the checkpoint: the model reads what happened
            told = self._telling(state.values)
            if told is not None:
                graph.update_state(config, told)
        return self._leg(graph, command, config)

    def delegate(
        self,
        tool_call_id: str,
        graph: Any,
        input: Any,
        config: dict[str, Any] | None = None,
        *,
        objective: str | None = None,
        agent: str | None = None,
    ) -> Any:
        """Stream `graph` as a subagent of the tool call `tool_call_id`; return what it says.

        Call it from a tool (the id from `InjectedToolCallId`): the child is
        `subagent(tool_call_id)`, its own run sharing this run's token and cost limits. It
        returns the child's final output, or a line saying how a guard or a cancel stopped
        it and its partial output.

        Compile the child without a checkpointer of its own: LangGraph then keeps its state
        in this graph's checkpoints, and a child that waits for approval (or calls
        `interrupt()`) pauses this graph too. The child records the wait in its own run;
        this run waits in `waiting_tool` on the tool's call, `pending_approvals` naming the
        child's run and call. Decide in the child's run; `drive` then carries the decision
        to the child, LangGraph runs the tool again, and `delegate` continues the child
        instead of starting it.

        Raises:
            ValueError: `graph` has a checkpointer of its own (its pause would leave this
                run going on without it).
        """
        child = self._delegated(graph, tool_call_id)
        if child.recorder.load_if_stored():  # called again on a drive: it paused
            done = child._leg(graph, input, config)
        else:
            done = child.run(graph, input, config, objective=objective, agent=agent)
        return _said(graph, done, agent)

    async def adelegate(
        self,
        tool_call_id: str,
        graph: Any,
        input: Any,
        config: dict[str, Any] | None = None,
        *,
        objective: str | None = None,
        agent: str | None = None,
    ) -> Any:
        """`delegate` for async graphs and tools (`graph.astream`)."""
        child = self._delegated(graph, tool_call_id)
        # Stored: called again on a drive, it paused.
        if await child.recorder.off_loop(child.recorder.load_if_stored):
            done = await child._aleg(graph, input, config)
        else:
            done = await child.arun(graph, input, config, objective=objective, agent=agent)
        return _said(graph, done, agent)

    def _delegated(self, graph: Any, tool_call_id: str) -> GraphRun:
        """The subagent run `delegate` streams `graph` in, once `graph` may be delegated to."""
        return self.subagent(self._one_per_task(_nested(graph, tool_call_id)))

    def _one_per_task(self, tool_call_id: str) -> str:
        """`tool_call_id`, once no other call delegates from the same task of the graph.

        A nested graph keeps its checkpoints under the namespace of the task that streams
        it, so two of them in one task (a `ToolNode` running a batch of calls) would share
        their state and resume each other's pauses.

        Raises:
            ValueError: another call of this task delegates already.
        """
        with contextlib.suppress(RuntimeError):  # outside a graph: nothing is shared
            namespace = get_config().get("configurable", {}).get("checkpoint_ns")
            if namespace:
                other = self.handler.delegating.setdefault(namespace, tool_call_id)
                if other != tool_call_id:
                    raise ValueError(
                        f"calls '{other}' and '{tool_call_id}' delegate from one task of the "
                        f"graph ('{namespace}'), where their subagents would share "
                        "checkpoints: give each tool call a task of its own (Send, as "
                        "create_react_agent(version='v2') does)"
                    )
        return tool_call_id

    @aleased
    async def arun(
        self,
        graph: Any,
        input: Any,
        config: dict[str, Any] | None = None,
        *,
        objective: str | None = None,
        agent: str | None = None,
        limits: Limits | None = None,
    ) -> ObservedRun:
        """`run` for async graphs and nodes (`graph.astream`).

        LangChain calls our (sync) callbacks in its executor's threads when a graph is
        streamed with `astream`; what this run records itself (its start, end, stops and
        resumes) is written off the event loop too (`Recorder.off_loop`).
        """
        recorder = self.recorder
        await recorder.off_loop(recorder.start, objective=objective, agent=agent, limits=limits)
        return await self._aleg(graph, input, config)

    @aleased
    async def adrive(self, graph: Any, config: dict[str, Any], value: Any = None) -> ObservedRun:
        """`drive` for async graphs and checkpointers (`graph.aget_state`, `astream`)."""
        state = await graph.aget_state(config)
        command = await self.recorder.off_loop(self._resume_command, state.interrupts, value)
        if isinstance(command, ObservedRun):
            return command
        if command is None:  # on from the checkpoint: the model reads what happened
            told = self._telling(state.values)
            if told is not None:
                await graph.aupdate_state(config, told)
        return await self._aleg(graph, command, config)

    def _telling(self, values: Any) -> dict[str, Any] | None:
        """The update that tells the model what it has not read (`Recorder.notes`: the events
        appended while the run waited) as a user message, for a graph whose state keeps its
        conversation under `messages` (`MessagesState`, `create_react_agent`); None if there
        is nothing to tell, or no such conversation (the model node then reads the run's
        record, e.g. `record.custom`, itself)."""
        notes = self.recorder.notes()
        if (
            not notes
            or not isinstance(values, dict)
            or not isinstance(values.get("messages"), list)
        ):
            return None
        return {"messages": [HumanMessage("\n".join(notes))]}

    def _resume_command(
        self, interrupts: Sequence[Any], value: Any
    ) -> Command[Any] | ObservedRun | None:
        """What to resume the graph with, or the run as it is if there is nothing to drive
        or a decision is missing (see `resume_command`)."""
        record = self.recorder.load()
        settled = self._settle_without_driving(record, None)
        if settled is not None:
            return settled
        return resume_command(self.recorder, record, interrupts, value)

    def _config(self, config: dict[str, Any] | None) -> dict[str, Any]:
        cfg = dict(config or {})
        theirs = cfg.get("callbacks")
        if isinstance(theirs, BaseCallbackManager):  # a manager, not a list: add to a copy
            manager = theirs.copy()
            manager.add_handler(self.handler, inherit=True)
            cfg["callbacks"] = manager
        else:
            cfg["callbacks"] = [*(theirs or ()), self.handler]
        self.handler.begin()
        return cfg

    def _modes(self) -> list[str]:
        """The stream modes to ask for: ours ("updates", for interrupts) and the caller's."""
        wanted = self.stream_mode
        user = [wanted] if isinstance(wanted, str) else list(wanted or ())
        return ["updates", *(mode for mode in user if mode != "updates")]

    def _forward(self, mode: str, chunk: Any) -> Any:
        """Hand `chunk` to `on_chunk` if the caller streams `mode`, shaped as LangGraph would."""
        wanted = self.stream_mode
        if self.on_chunk is None or wanted is None:
            return None
        if isinstance(wanted, str):
            return self.on_chunk(chunk) if mode == wanted else None
        return self.on_chunk((mode, chunk)) if mode in wanted else None

    def _leg(self, graph: Any, input: Any, config: dict[str, Any] | None) -> ObservedRun:
        interrupts: list[Any] = []
        driving = _DRIVING.set(self.handler)  # see `_Handler.mine`
        try:
            with quiet_intended_stops(self.handler), watching(self.handler.attempts):
                stream = graph.stream(input, self._config(config), stream_mode=self._modes())
                for mode, chunk in stream:
                    if mode == "updates":
                        interrupts.extend(chunk.get("__interrupt__", ()))
                    self._forward(mode, chunk)
            if self.handler.stop is not None:
                raise self.handler.stop
        except Exception as exc:  # noqa: BLE001  (_ended re-raises all but our stops)
            return ended(self.recorder, self.handler, exc)
        finally:
            _DRIVING.reset(driving)
        return finish(self.recorder, self.handler, interrupts)

    async def _aleg(self, graph: Any, input: Any, config: dict[str, Any] | None) -> ObservedRun:
        interrupts: list[Any] = []
        driving = _DRIVING.set(self.handler)  # see `_Handler.mine`
        try:
            modes = self._modes()
            with quiet_intended_stops(self.handler), watching(self.handler.attempts):
                stream = graph.astream(input, self._config(config), stream_mode=modes)
                async for mode, chunk in stream:
                    if mode == "updates":
                        interrupts.extend(chunk.get("__interrupt__", ()))
                    forwarded = self._forward(mode, chunk)
                    if inspect.isawaitable(forwarded):
                        await forwarded
            if self.handler.stop is not None:
                raise self.handler.stop
        except Exception as exc:  # noqa: BLE001  (_ended re-raises all but our stops)
            return await self.recorder.off_loop(ended, self.recorder, self.handler, exc)
        finally:
            _DRIVING.reset(driving)
        return await self.recorder.off_loop(finish, self.recorder, self.handler, interrupts)


def _nested(graph: Any, tool_call_id: str) -> str:
    """`tool_call_id`, once `graph` is fit to be delegated to (see `GraphRun.delegate`)."""
    if isinstance(getattr(graph, "checkpointer", None), BaseCheckpointSaver):
        raise ValueError(
            "delegate() needs a graph compiled without a checkpointer of its own: LangGraph "
            "then keeps its state in the caller's checkpoints, and its pause pauses the "
            "caller; with its own, use subagent(tool_call_id).run(...) and read its status"
        )
    return tool_call_id


def _said(graph: Any, done: ObservedRun, agent: str | None) -> Any:
    """What a `delegate` tool returns of its subagent's run."""
    if done.status == RunStatus.COMPLETED:
        return done.final_output
    name = agent or getattr(graph, "name", None) or "subagent"
    return stopped_line(name, done.record, done.partial_output)
