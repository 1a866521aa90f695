"""Property: whatever an SDK's model asks for, the adapter's log is one our validator accepts.

Scripts of model turns are drawn (each a batch of calls that succeed, fail, need approval,
ask a subagent that needs approval, or cancel the run from "another process", then a final
answer); the SDK's real runner plays them, approvals are decided as drawn (in the subagent's
run for its calls) and the run resumed from our store, until it ends. The run ends completed
(cancelled, if a call cancelled it; terminated at a drawn turn limit), every log validates,
no action is left open, and no subagent is left waiting.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

pytest.importorskip("agents")
pytest.importorskip("pydantic_ai")
pytest.importorskip("langgraph")

from langchain_core.tools import InjectedToolCallId
from pydantic_ai import RunContext

from agentfsm.guards import MaxTurns
from agentfsm.runtime import PendingApproval, approve, cancel, reject
from agentfsm.stores import MemoryEventStore
from tests.adapters._common import run, validates

KINDS = ("ok", "fail", "approval", "cancel")
#: The SDKs whose adapters pause a caller on its subagent's approval draw this kind too.
WITH_SUBAGENTS = (*KINDS, "delegate")
#: Where a run's actions may end: resolved, or unknown when a cancel caught them in flight.
SETTLED = {"succeeded", "failed", "rejected", "unknown"}
TERMINAL = {"completed", "failed", "cancelled", "terminated"}
#: The store the `hang_up` tools cancel run r1 in (set by each example).
STORE: list[MemoryEventStore] = []


def hang_up(reason: str) -> str:
    """Cancel run r1 from "another process" while this call runs."""
    cancel(STORE[0], "r1", reason=reason)
    return "hung up"


@st.composite
def scripts(
    draw: st.DrawFn, kinds: tuple[str, ...] = KINDS
) -> tuple[list[list[tuple[str, str]]], list[bool]]:
    """Up to three turns of one to three calls `(kind, call_id)`, and decisions to draw on."""
    ids = itertools.count()
    turns = [
        [
            (kind, f"c{next(ids)}")
            for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=3))
        ]
        for _ in range(draw(st.integers(0, 3)))
    ]
    return turns, draw(st.lists(st.booleans(), min_size=9, max_size=9))


def _decide(store: MemoryEventStore, pending: Sequence[PendingApproval], votes: list[bool]) -> None:
    for call in pending:
        if votes.pop() if votes else True:
            approve(store, call.run_id, call.action_id, approver="alice")
        else:
            reject(store, call.run_id, call.action_id, approver="bob", reason="no")


def _guards(max_turns: int | None) -> list[Any]:
    return [] if max_turns is None else [MaxTurns(max_turns)]


def _check(
    store: MemoryEventStore,
    done: Any,
    turns: list[Any],
    tmp_path: Path,
    max_turns: int | None = None,
) -> None:
    cancels = any(kind == "cancel" for turn in turns for kind, _ in turn)
    if done.status == "terminated":  # only our turn limit may stop it, and only past it
        assert max_turns is not None
        assert done.stop_reason == "max_turns"
        assert done.record.turn == max_turns
    else:
        assert done.status == ("cancelled" if cancels else "completed")
    assert {a.status for a in done.record.actions.values()} <= SETTLED
    assert validates(store, "r1", tmp_path) == 0
    for info in store.runs():  # the subagents: each ended, with a legal log
        if info.run_id != "r1":
            event(f"a subagent ended {info.status}")
            if info.status == "failed":
                print(
                    info.run_id,
                    [(e.type, getattr(e, "error", None)) for e in store.events(info.run_id)],
                )
            assert info.status in TERMINAL, (info.run_id, info.status)
            assert validates(store, info.run_id, tmp_path) == 0


SETTINGS = settings(
    max_examples=50,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(scripts(WITH_SUBAGENTS), st.none() | st.integers(1, 4))
def test_openai_agents_runs_always_log_legally(
    tmp_path: Path, drawn: Any, max_turns: int | None
) -> None:
    """Mixed batches, failures, approvals accepted or rejected, subagents: always legal logs."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentfsm.adapters.openai_agents import AgentsRun
    from tests.adapters import _openai_agents_app as app

    turns, votes = drawn

    class Refunds(ScriptedModel):
        """The subagent: asks to refund its question, then answers (its step follows its input).

        A resumed nested run gets a new model, so the step comes from what the run holds.
        """

        async def get_response(self, *args: Any, **kw: Any) -> Any:
            input = kw["input"] if "input" in kw else args[1]
            items = input if isinstance(input, list) else [{"role": "user", "content": input}]
            question = next(i["content"] for i in items if i.get("role") == "user")
            if any(i.get("type") == "function_call_output" for i in items):
                step: Any = [assistant_message(f"refunded {question}")]
            else:
                step = [function_call("refund", {"order_id": question}, call_id=f"{question}r")]
            self._steps = [self._coerce_step(step, 0)]
            return await super().get_response(*args, **kw)

    def response(turn: list[tuple[str, str]]) -> list[Any]:
        out = []
        for kind, cid in turn:
            if kind == "delegate":
                out.append(function_call("ask", {"input": cid}, call_id=cid))
            elif kind == "approval":
                out.append(function_call("refund", {"order_id": cid}, call_id=cid))
            elif kind == "cancel":
                out.append(function_call("hang_up", {"reason": cid}, call_id=cid))
            else:
                city = "Atlantis" if kind == "fail" else cid
                out.append(function_call("get_weather", {"city": city}, call_id=cid))
        return out

    steps = [response(t) for t in turns] + [[assistant_message("done")]]

    def agent(remaining: list[Any], run_: AgentsRun) -> Agent[Any]:
        model = app.scripted(*remaining)
        refunds = Agent(name="refunds", model=Refunds(), tools=[app.refund])
        tools = [
            app.get_weather,
            app.refund,
            function_tool(hang_up),
            run_.agent_tool(refunds, tool_name="ask"),
        ]
        return Agent(name="support", model=model, tools=tools)

    store = MemoryEventStore()
    STORE[:] = [store]
    guards = _guards(max_turns)
    driver = AgentsRun(store, "r1", guards=guards)
    current = agent(steps, driver)
    done = run(driver.arun(current, "go"))
    used = len(current.model.calls)  # type: ignore[union-attr]
    while done.pending_approvals:
        _decide(store, done.pending_approvals, votes)
        driver = AgentsRun(store, "r1", guards=guards)
        current = agent(steps[used:], driver)
        done = run(driver.adrive(current))
        used += len(current.model.calls)  # type: ignore[union-attr]
    _check(store, done, turns, tmp_path, max_turns)


@SETTINGS
@given(scripts(WITH_SUBAGENTS), st.none() | st.integers(1, 4))
def test_pydantic_ai_runs_always_log_legally(
    tmp_path: Path, drawn: Any, max_turns: int | None
) -> None:
    """The same scripts through `agent.iter()`: retries, deferred approvals, always legal."""
    from pydantic_ai.exceptions import UnexpectedModelBehavior
    from pydantic_ai.messages import ModelResponse, ToolCallPart

    from agentfsm.adapters.pydantic_ai import AgentIterRun
    from tests.adapters._pydantic_ai_app import REFUND, USAGE, answer, make_agent

    turns, votes = drawn

    def response(turn: list[tuple[str, str]]) -> ModelResponse:
        parts = []
        for kind, cid in turn:
            if kind == "delegate":
                parts.append(ToolCallPart("ask", {"question": cid}, tool_call_id=cid))
            elif kind == "approval":
                parts.append(ToolCallPart("refund", {"order_id": cid}, tool_call_id=cid))
            elif kind == "cancel":
                parts.append(ToolCallPart("hang_up", {"reason": cid}, tool_call_id=cid))
            else:
                city = "Atlantis" if kind == "fail" else cid
                parts.append(ToolCallPart("get_weather", {"city": city}, tool_call_id=cid))
        return ModelResponse(parts=parts, usage=USAGE)

    agent = make_agent(*[response(t) for t in turns], answer("done"))
    agent.tool_plain(hang_up)
    refunds = make_agent(*REFUND)
    store = MemoryEventStore()
    STORE[:] = [store]
    driver: list[AgentIterRun] = []  # the run driving the agent now (a resume makes another)

    @agent.tool
    async def ask(ctx: RunContext[None], question: str) -> Any:
        """Ask the refunds agent."""
        return await driver[0].adelegate(ctx, refunds, question)

    try:
        guards = _guards(max_turns)
        driver[:] = [AgentIterRun(store, "r1", guards=guards)]
        done = run(driver[0].arun(agent, "go"))
        while done.pending_approvals:
            _decide(store, done.pending_approvals, votes)
            driver[:] = [AgentIterRun(store, "r1", guards=guards)]
            done = run(driver[0].adrive(agent))
    except UnexpectedModelBehavior as exc:
        gave_up = str(exc)  # the SDK gave up (a tool retried past its limit)
    else:
        _check(store, done, turns, tmp_path, max_turns)
        return
    record = store.load("r1")
    assert (record.status, record.error and record.error.message) == ("failed", gave_up)
    assert validates(store, "r1", tmp_path) == 0


@SETTINGS
@given(scripts(("ok", "fail", "delegate")), st.booleans())
def test_langgraph_runs_always_log_legally(tmp_path: Path, drawn: Any, gated: bool) -> None:
    """A model + ToolNode graph, every call put to a person when `gated`, and subagent
    graphs that ask for approval in their own runs: always legal logs."""
    from langchain_core.messages import HumanMessage
    from langchain_core.tools import tool
    from langgraph.checkpoint.memory import InMemorySaver
    from structlog.testing import capture_logs

    from agentfsm.adapters.langgraph import GraphRun
    from tests.adapters import _langgraph_app as app

    turns, votes = drawn

    def message(kind: str, cid: str) -> dict[str, Any]:
        if kind == "delegate":
            name, args = "ask", {"question": cid}
        else:
            name, args = "get_weather", {"city": "Atlantis" if kind == "fail" else cid}
        return {"name": name, "args": args, "id": cid, "type": "tool_call"}

    messages = [
        app.AIMessage(content="", tool_calls=[message(kind, cid) for kind, cid in turn])
        for turn in turns
    ]
    driver: list[GraphRun] = []  # the run driving the graph now (a resume makes another)
    children: dict[str, Any] = {}  # one graph per call: a resume continues its script

    @tool
    def ask(question: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Any:
        """Ask the refunds agent."""
        child = children.setdefault(
            question,
            app.graph_with_tools(
                [app.call("refund", f"{question}r", order_id=question), app.answer("refunded")],
                [app.refund],
                approval=True,
            ),
        )
        return driver[0].delegate(tool_call_id, child, {"messages": [HumanMessage(question)]})

    g = app.graph_with_tools(
        [*messages, app.answer("done")],
        [app.get_weather, ask],
        approval=gated,
        checkpointer=InMemorySaver(),
    )
    config = {"configurable": {"thread_id": "t1"}}
    store = MemoryEventStore()
    with capture_logs():
        driver[:] = [GraphRun(store, "r1")]
        done = driver[0].run(g, {"messages": [HumanMessage("go")]}, config)
        while done.pending_approvals:
            _decide(store, done.pending_approvals, votes)
            driver[:] = [GraphRun(store, "r1")]
            done = driver[0].drive(g, config)
    _check(store, done, [[("ok", "")]], tmp_path)


@SETTINGS
@given(scripts(WITH_SUBAGENTS), st.none() | st.integers(1, 4))
def test_claude_agent_sdk_runs_always_log_legally(
    tmp_path: Path, drawn: Any, max_turns: int | None
) -> None:
    """The same scripts through the SDK's `ClaudeSDKClient` over the scripted CLI: deferred
    approvals resumed, calls needing approval beside others refused, subagents (their own
    sessions) pausing the caller: always legal logs."""
    pytest.importorskip("claude_agent_sdk")
    from claude_agent_sdk import ClaudeAgentOptions

    from agentfsm.adapters.claude_agent_sdk import ClaudeRun, Subagent
    from agentfsm.testing.fixtures.claude_transport import Answer, ScriptedCLI, Use, scripted_cli
    from tests.adapters._drivers import get_weather, refund

    turns, votes = drawn
    tools = {"get_weather": get_weather, "refund": refund, "hang_up": hang_up}

    def use(kind: str, cid: str) -> Use:
        if kind == "delegate":
            return Use(cid, "mcp__subagents__refunds", {"prompt": cid})
        if kind == "approval":
            return Use(cid, "refund", {"order_id": cid})
        if kind == "cancel":
            return Use(cid, "hang_up", {"reason": cid})
        return Use(cid, "get_weather", {"city": "Atlantis" if kind == "fail" else cid})

    steps = [Answer(uses=tuple(use(k, c) for k, c in t)) for t in turns] + [Answer("done")]
    parent = scripted_cli(steps, tools, tmp_path)
    sessions: dict[str, list[Answer]] = {}  # each child's own script, by its session
    children = itertools.count()

    def child(options: ClaudeAgentOptions) -> ScriptedCLI:
        if options.resume is not None:
            return ScriptedCLI(options, sessions[options.resume], tools, tmp_path)
        n = next(children)
        script = [Answer(uses=(Use(f"r{n}", "refund", {"order_id": f"k{n}"}),)), Answer("ok")]
        cli = ScriptedCLI(options, script, tools, tmp_path)
        sessions[cli.session_id] = script
        return cli

    subagents = {"refunds": Subagent("Ask the refunds agent.", ClaudeAgentOptions(),
                                     transport=child)}  # fmt: skip
    store = MemoryEventStore()
    STORE[:] = [store]

    def claude() -> ClaudeRun:
        return ClaudeRun(store, "r1", needs_approval={"refund"}, subagents=subagents,
                         guards=_guards(max_turns))  # fmt: skip

    done = run(claude().arun("go", ClaudeAgentOptions(), transport=parent))
    while done.pending_approvals:
        _decide(store, done.pending_approvals, votes)
        done = run(claude().adrive(ClaudeAgentOptions(), transport=parent))
    _check(store, done, turns, tmp_path, max_turns)
