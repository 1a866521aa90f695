"""The LangGraph adapter: a real compiled graph, offline, under our lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from structlog.testing import capture_logs

from agentfsm.adapters.langgraph import ApprovalMismatchError, GraphRun
from agentfsm.errors import IllegalTransitionError, LifecycleError
from agentfsm.events import Limits
from agentfsm.runtime import approve, cancel
from agentfsm.stores import MemoryEventStore
from tests.adapters import _langgraph_app as app
from tests.adapters._common import (
    assert_caller_and_child_finished,
    assert_caller_waits_on_child,
    assert_tree_stopped,
    types,
    validates,
)
from tests.adapters._langgraph_app import answer, call, graph

ASK = {"messages": [HumanMessage("weather?")]}


def drive(run: GraphRun, g: Any, config: dict[str, Any] | None = None, **kw: Any) -> Any:
    with capture_logs():
        return run.run(g, ASK, config, **kw)


def _looping(n: int = 5) -> Any:
    return graph([call("get_weather", f"call_{i}", city=f"C{i}") for i in range(n)])


def test_the_recursion_limit_becomes_run_terminated_max_turns(tmp_path: Path) -> None:
    """GraphRecursionError (4 super-steps: two model turns) ends as run.terminated max_turns."""
    store = MemoryEventStore()
    done = drive(GraphRun(store, "r1"), _looping(), {"recursion_limit": 4})
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "max_turns",
        "Recursion limit of 4 reached without hitting a stop condition",
    )
    assert done.record.turn == 2
    assert validates(store, "r1", tmp_path) == 0


def test_a_graph_that_ends_without_a_final_answer_raises_naming_the_signal() -> None:
    """A graph ending right after a tool call: run.completed is illegal; the run is failed."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    model = app.GenericFakeChatModel(
        messages=iter([call("get_weather", "call_1", city="Paris")]), disable_streaming=True
    )
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    store = MemoryEventStore()
    with pytest.raises(IllegalTransitionError) as err:
        drive(GraphRun(store, "r1"), g.compile())
    assert err.value.signal == "langgraph stream ended"  # type: ignore[attr-defined]
    assert str(err.value).endswith("(caused by langgraph stream ended)")
    assert store.load("r1").status == "failed"


def test_a_plain_interrupt_pauses_and_resumes_with_a_value(tmp_path: Path) -> None:
    """interrupt("need a city") is run.paused (not a failure); resume(value) is run.resumed."""
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.types import interrupt

    model = app.GenericFakeChatModel(
        messages=iter([answer("Paris it is.")]), disable_streaming=True
    )

    def ask(state: MessagesState) -> dict[str, Any]:
        city = interrupt("need a city")
        return {"messages": [HumanMessage(city)]}

    g = StateGraph(MessagesState)
    g.add_node("ask", ask)
    g.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
    g.add_edge(START, "ask")
    g.add_edge("ask", "agent")
    g.add_edge("agent", END)
    compiled = g.compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t1"}}
    store = MemoryEventStore()
    paused = drive(GraphRun(store, "r1"), compiled, cfg)
    assert (paused.status, paused.record.pause_reason) == ("paused", "need a city")
    with capture_logs():
        done = GraphRun(store, "r1").drive(compiled, cfg, "Paris")
    assert (done.status, done.final_output) == ("completed", "Paris it is.")
    assert validates(store, "r1", tmp_path) == 0


def test_a_tool_that_calls_interrupt_pauses_and_runs_again_on_resume(tmp_path: Path) -> None:
    """interrupt() inside a tool: a retryable attempt, run.paused; the resumed run retries it."""
    from langgraph.types import interrupt

    @tool
    def refund(order_id: str) -> str:
        """Refund an order once a person confirms."""
        answer_ = interrupt(f"refund {order_id}?")
        return f"refunded {order_id}" if answer_ == "yes" else "not refunded"

    g = app.graph_with_tools(
        [call("refund", "call_1", order_id="O-1"), answer("Refunded.")],
        [refund],
        checkpointer=InMemorySaver(),
    )
    cfg = {"configurable": {"thread_id": "t1"}}
    store = MemoryEventStore()
    paused = drive(GraphRun(store, "r1"), g, cfg)
    assert (paused.status, paused.record.pause_reason) == ("paused", "refund O-1?")
    error = paused.record.actions["call_1"].error
    assert (error.kind, error.retryable) == ("interrupted", True)
    with capture_logs():
        done = GraphRun(store, "r1").drive(g, cfg, "yes")
    action = done.record.actions["call_1"]
    assert (done.status, action.result, action.attempts) == ("completed", "refunded O-1", 2)
    assert types(store, "r1")[3:] == [
        "tool.requested", "tool.started", "tool.failed", "run.paused", "run.resumed",
        "tool.started", "tool.completed", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    assert validates(store, "r1", tmp_path) == 0


def test_an_async_delegate_pauses_its_caller_and_is_driven_on_through_arun_and_adrive(
    tmp_path: Path,
) -> None:
    """astream and an async tool: `adelegate` pauses the caller and continues on `aresume`."""
    import asyncio

    store, saver = MemoryEventStore(), InMemorySaver()
    cfg = {"configurable": {"thread_id": "m1"}}
    manager = GraphRun(store, "m1")
    with capture_logs():
        paused = asyncio.run(
            manager.arun(app.manager_graph(manager, saver, is_async=True), ASK, cfg)
        )
    assert_caller_waits_on_child(paused, store, app.CALLS)
    approve(store, "m1/call_m1", "call_r1", approver="alice")
    manager = GraphRun(store, "m1")
    resumed = app.manager_graph(manager, saver, resumed=True, is_async=True)
    with capture_logs():
        done = asyncio.run(manager.adrive(resumed, cfg))
    out = {"status": done.status, "final_output": done.final_output, "calls": app.CALLS}
    assert_caller_and_child_finished(out, store, ["refund O-1"], "O-1 refunded.", tmp_path)


def _refunds_for(question: str) -> Any:
    """A subagent graph that asks to refund `question` (call `<question>r`), then answers."""
    steps = [call("refund", f"{question}r", order_id=question), answer(f"{question} refunded")]
    return app.graph_with_tools(steps, [app.refund], approval=True)


def _batch_graph(
    driver: list[GraphRun], batch: list[tuple[str, str]], *, send: bool
) -> tuple[Any, list[str]]:
    """A graph whose model asks for `batch` (`(tool, call_id)`: `ask` delegates), then answers.

    `send`: each call a task of its own (`Send`, as `create_react_agent(version="v2")`),
    else one `ToolNode` task runs the batch. Returns the graph and what the model read.
    """
    from langgraph.prebuilt import ToolNode
    from langgraph.prebuilt.tool_node import ToolCallWithContext
    from langgraph.types import Send

    children: dict[str, Any] = {}  # one graph a call: a resume continues its script
    read: list[str] = []

    @tool
    def ask(question: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Any:
        """Ask the refunds agent."""
        child = children.setdefault(question, _refunds_for(question))
        return driver[0].delegate(tool_call_id, child, {"messages": [HumanMessage(question)]})

    calls = [
        {"name": name, "args": {"question": cid} if name == "ask" else {"city": cid}, "id": cid}
        for name, cid in batch
    ]
    model = app.GenericFakeChatModel(
        messages=iter([app.AIMessage(content="", tool_calls=calls), answer("All done.")]),
        disable_streaming=True,
    )

    def agent(state: MessagesState) -> dict[str, Any]:
        read[:] = [str(m.content) for m in state["messages"] if isinstance(m, app.ToolMessage)]
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> Any:
        last = state["messages"][-1]
        if not last.tool_calls:
            return END
        if not send:
            return "tools"
        return [
            Send(
                "tools",
                ToolCallWithContext(__type="tool_call_with_context", tool_call=c, state=state),
            )
            for c in last.tool_calls
        ]

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([ask, app.get_weather], handle_tool_errors=True))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=InMemorySaver()), read


def _drive_batch(store: MemoryEventStore, g: Any, driver: list[GraphRun], decide: Any) -> Any:
    """Run r1, decide what it waits for, resume; the run as it ended."""
    cfg = {"configurable": {"thread_id": "r1"}}
    with capture_logs():
        driver[:] = [GraphRun(store, "r1")]
        done = driver[0].run(g, ASK, cfg)
        while done.pending_approvals:
            for pending in done.pending_approvals:
                decide(store, pending.run_id, pending.action_id)
            driver[:] = [GraphRun(store, "r1")]
            done = driver[0].drive(g, cfg)
    return done


def _approve(store: MemoryEventStore, run_id: str, aid: str) -> None:
    approve(store, run_id, aid, approver="alice")


def test_with_a_task_per_call_parallel_delegates_pause_and_resume_each(tmp_path: Path) -> None:
    """Send: two subagents wait at once; decided, each resumes; the free call ran once."""
    store, driver = MemoryEventStore(), []
    g, read = _batch_graph(driver, [("ask", "c1"), ("get_weather", "c0"), ("ask", "c2")], send=True)
    done = _drive_batch(store, g, driver, _approve)
    assert (done.status, done.final_output) == ("completed", "All done.")
    assert sorted(read) == ["c1 refunded", "c2 refunded", "sunny in c0"]
    assert app.CALLS.count("get_weather c0") == 1
    assert sorted(c for c in app.CALLS if c.startswith("refund")) == ["refund c1", "refund c2"]
    for run_id in ("r1", "r1/c1", "r1/c2"):
        assert store.load(run_id).status == "completed"
        assert validates(store, run_id, tmp_path) == 0


def test_a_batch_in_one_task_does_not_run_its_finished_calls_again_on_resume(
    tmp_path: Path,
) -> None:
    """One ToolNode task: its node re-runs on resume; the finished call is refused, not rerun."""
    store, driver = MemoryEventStore(), []
    g, read = _batch_graph(driver, [("get_weather", "c0"), ("ask", "c1")], send=False)
    done = _drive_batch(store, g, driver, _approve)
    assert done.status == "completed"
    assert app.CALLS.count("get_weather c0") == 1
    assert "c1 refunded" in read
    assert any("call 'c0' already ran in run 'r1'" in text for text in read)
    assert done.record.actions["c0"].result == "sunny in c0"  # its one run, as recorded
    assert validates(store, "r1", tmp_path) == 0


def test_two_calls_delegating_from_one_task_are_refused_for_the_second(tmp_path: Path) -> None:
    """One ToolNode task holds one subagent: the other call fails, saying to use Send."""
    store, driver = MemoryEventStore(), []
    g, read = _batch_graph(driver, [("ask", "c1"), ("ask", "c2")], send=False)
    done = _drive_batch(store, g, driver, _approve)
    assert done.status == "completed"
    refused = [a for a in done.record.actions.values() if a.status == "failed"]
    assert len(refused) == 1
    assert "give each tool call a task of its own (Send" in refused[0].error.message
    ran = {"c1", "c2"} - {refused[0].action_id}
    assert next(f"{cid} refunded" for cid in ran) in read
    assert validates(store, "r1", tmp_path) == 0
    assert store.load(f"r1/{ran.pop()}").status == "completed"


def test_delegating_to_a_graph_with_its_own_checkpointer_is_refused() -> None:
    """Its pause would not pause the caller: refused before it runs, saying what to do."""
    parent = GraphRun(MemoryEventStore(), "r1")
    child = graph([answer("never")], checkpointer=InMemorySaver())
    with pytest.raises(ValueError, match="without a checkpointer of its own"):
        parent.delegate("call_1", child, ASK)


def test_an_interrupted_call_other_than_the_approved_one_fails_closed(tmp_path: Path) -> None:
    """Our store approved Paris, the graph's interrupt asks for Rome: ApprovalMismatchError."""
    store = MemoryEventStore()
    saver = InMemorySaver()
    cfg = {"configurable": {"thread_id": "r1"}}
    g = graph([call("get_weather", "call_1", city="Paris")], approval=True, checkpointer=saver)
    drive(GraphRun(store, "r1"), g, cfg)
    approve(store, "r1", "call_1", approver="alice")
    other = MemoryEventStore()  # the same call id, approved for other arguments elsewhere
    drive(
        GraphRun(other, "r1"),
        graph([call("get_weather", "call_1", city="Rome")], approval=True, checkpointer=saver),
        {"configurable": {"thread_id": "r2"}},
    )
    before = len(app.CALLS)
    with pytest.raises(ApprovalMismatchError) as err, capture_logs():
        GraphRun(other, "r1").drive(g, cfg)
    assert err.value.action_id == "call_1"
    assert err.value.expected == other.load("r1").actions["call_1"].arguments_digest
    assert err.value.actual == store.load("r1").actions["call_1"].arguments_digest
    assert app.CALLS[before:] == []


def test_an_async_graph_is_observed_through_arun_and_adrive(tmp_path: Path) -> None:
    """astream with async nodes: the same events; an approval pauses and aresume completes it."""
    import asyncio

    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    model = app.GenericFakeChatModel(
        messages=iter([call("get_weather", "call_1", city="Paris"), answer("Sunny.")]),
        disable_streaming=True,
    )

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def approval(state: MessagesState) -> dict[str, Any]:
        app.approval_request(state["messages"][-1].tool_calls)
        return {}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("approval", approval)
    g.add_node("tools", ToolNode([app.get_weather]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition, {"tools": "approval", END: END})
    g.add_edge("approval", "tools")
    g.add_edge("tools", "agent")
    compiled = g.compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t1"}}
    store = MemoryEventStore()

    async def main() -> tuple[Any, Any]:
        paused = await GraphRun(store, "r1").arun(compiled, ASK, cfg)
        approve(store, "r1", "call_1", approver="alice")
        return paused, await GraphRun(store, "r1").adrive(compiled, cfg)

    with capture_logs():
        paused, done = asyncio.run(main())
    assert paused.status == "waiting_approval"
    assert (done.status, done.final_output) == ("completed", "Sunny.")
    assert done.record.actions["call_1"].result == "sunny in Paris"
    assert validates(store, "r1", tmp_path) == 0


def _researcher_then_writer() -> Any:
    researcher = app.GenericFakeChatModel(messages=iter([answer("Paris: sunny.")]))
    writer = app.GenericFakeChatModel(messages=iter([answer("It is sunny in Paris.")]))
    g = StateGraph(MessagesState)
    g.add_node("researcher", lambda s: {"messages": [researcher.invoke(s["messages"])]})
    g.add_node("writer", lambda s: {"messages": [writer.invoke(s["messages"])]})
    g.add_edge(START, "researcher")
    g.add_edge("researcher", "writer")
    g.add_edge("writer", END)
    return g.compile()


def test_model_calls_of_parallel_branches_are_refused_saying_what_to_do() -> None:
    """Two branches call their models at once: one run holds one model call at a time.

    Each model waits in its call for the other branch's to start (a barrier); the one whose
    `model.started` comes second is refused, and its branch breaks the barrier.
    """
    import threading

    barrier = threading.Barrier(2, timeout=5)

    class Waiting(app.GenericFakeChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait()
            return super()._generate(*args, **kwargs)

    def branch(text: str) -> Any:
        model = Waiting(messages=iter([answer(text)]), disable_streaming=True)

        def node(state: MessagesState) -> dict[str, Any]:
            try:
                return {"messages": [model.invoke(state["messages"])]}
            except LifecycleError:
                barrier.abort()
                raise

        return node

    g = StateGraph(MessagesState)
    g.add_node("a", branch("A."))
    g.add_node("b", branch("B."))
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge("a", END)
    g.add_edge("b", END)
    store = MemoryEventStore()
    with pytest.raises(LifecycleError, match="a model call is open") as caught:
        drive(GraphRun(store, "r1"), g.compile())
    assert any("run each branch as a subagent" in note for note in caught.value.__notes__)
    # The other branch's call may still complete before the run fails, or be refused after.
    assert types(store, "r1")[:2] == ["run.started", "model.started"]
    assert store.load("r1").status == "failed"


def test_parallel_branches_each_run_as_a_subagent_call_their_models_at_once(
    tmp_path: Path,
) -> None:
    """Each branch's node streams its graph as a run of its own: both calls open at once."""
    import threading

    barrier = threading.Barrier(2, timeout=5)  # both models are in their call together

    class Waiting(app.GenericFakeChatModel):
        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            barrier.wait()
            return super()._generate(*args, **kwargs)

    store = MemoryEventStore()
    parent = GraphRun(store, "r1")

    def branch(name: str) -> Any:
        model = Waiting(messages=iter([answer(f"{name} done.")]), disable_streaming=True)
        inner = StateGraph(MessagesState)
        inner.add_node("agent", lambda s: {"messages": [model.invoke(s["messages"])]})
        inner.add_edge(START, "agent")
        inner.add_edge("agent", END)
        compiled = inner.compile()

        def node(state: MessagesState) -> dict[str, Any]:
            done = parent.subagent(name).run(compiled, {"messages": state["messages"]})
            return {"messages": [AIMessage(str(done.final_output))]}

        return node

    writer = app.GenericFakeChatModel(messages=iter([answer("Both done.")]))
    g = StateGraph(MessagesState)
    g.add_node("a", branch("a"))
    g.add_node("b", branch("b"))
    g.add_node("writer", lambda s: {"messages": [writer.invoke(s["messages"])]})
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge(["a", "b"], "writer")
    g.add_edge("writer", END)
    with capture_logs():
        done = parent.run(g.compile(), ASK)
    assert (done.status, done.final_output) == ("completed", "Both done.")
    assert validates(store, "r1", tmp_path) == 0
    for name in ("a", "b"):
        child = store.load(f"r1/{name}")
        assert (child.status, child.final_output) == ("completed", f"{name} done.")
        assert validates(store, f"r1/{name}", tmp_path) == 0


def test_a_two_agent_graph_records_both_agents_model_calls_in_one_run(tmp_path: Path) -> None:
    """Without `agents`, moving from the researcher node to the writer node is no handoff."""
    store = MemoryEventStore()
    done = drive(GraphRun(store, "r1"), _researcher_then_writer())
    assert (done.status, done.final_output, done.record.turn) == (
        "completed",
        "It is sunny in Paris.",
        2,
    )
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "model.started", "model.completed",
        "run.completed",
    ]  # fmt: skip
    assert done.record.current_agent is None
    assert validates(store, "r1", tmp_path) == 0


def test_an_edge_between_agent_nodes_is_a_handoff(tmp_path: Path) -> None:
    """agents=[researcher, writer]: entering the writer after the researcher records `handoff`."""
    store = MemoryEventStore()
    run = GraphRun(store, "r1", agents=["researcher", "writer"])
    done = drive(run, _researcher_then_writer())
    assert (done.status, done.final_output) == ("completed", "It is sunny in Paris.")
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "handoff", "model.started",
        "model.completed", "run.completed",
    ]  # fmt: skip
    assert [e.to_agent for e in store.events("r1") if e.type == "handoff"] == ["writer"]
    assert done.record.current_agent == "writer"
    assert validates(store, "r1", tmp_path) == 0


def test_a_conditional_edge_back_to_the_started_agent_is_a_handoff(tmp_path: Path) -> None:
    """run(agent="triage"): entering triage is no handoff; triage → billing → triage is two."""
    triage = app.GenericFakeChatModel(messages=iter([answer("For billing."), answer("Done.")]))
    billing = app.GenericFakeChatModel(messages=iter([answer("Refunded.")]))

    def route(state: MessagesState) -> str:
        return "billing" if state["messages"][-1].text == "For billing." else END

    g = StateGraph(MessagesState)
    g.add_node("triage", lambda s: {"messages": [triage.invoke(s["messages"])]})
    g.add_node("billing", lambda s: {"messages": [billing.invoke(s["messages"])]})
    g.add_edge(START, "triage")
    g.add_conditional_edges("triage", route, ["billing", END])
    g.add_edge("billing", "triage")
    store = MemoryEventStore()
    done = drive(GraphRun(store, "r1", agents={"triage", "billing"}), g.compile(), agent="triage")
    assert (done.status, done.final_output) == ("completed", "Done.")
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "handoff", "model.started",
        "model.completed", "handoff", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    handoffs = [e.to_agent for e in store.events("r1") if e.type == "handoff"]
    assert handoffs == ["billing", "triage"]
    assert done.record.current_agent == "triage"
    assert validates(store, "r1", tmp_path) == 0


@pytest.mark.parametrize("subgraphs", [False, True], ids=["flat", "agent-subgraphs"])
def test_a_handoff_tool_is_a_completed_tool_call_then_a_handoff(
    subgraphs: bool, tmp_path: Path
) -> None:
    """transfer_to_billing returns Command(goto="billing"): the call completes, then `handoff`.

    Flat: one ToolNode routes the command; agent subgraphs: the tool sends `Command.PARENT`.
    """
    g = app.swarm(
        {
            "triage": [call("transfer_to_billing", "call_1")],
            "billing": [answer("Refunded.")],
        },
        subgraphs=subgraphs,
    )
    store = MemoryEventStore()
    done = drive(GraphRun(store, "r1", agents=["triage", "billing"]), g)
    assert (done.status, done.final_output) == ("completed", "Refunded.")
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "tool.requested", "tool.started",
        "tool.completed", "handoff", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    action = done.record.actions["call_1"]
    assert (action.tool, action.status, action.result) == (
        "transfer_to_billing",
        "succeeded",
        "Transferred to billing",
    )
    assert done.record.current_agent == "billing"
    assert validates(store, "r1", tmp_path) == 0


def test_an_agent_handed_back_to_records_a_second_handoff(tmp_path: Path) -> None:
    """triage → billing → triage through transfer tools (agent subgraphs): two handoffs."""
    g = app.swarm(
        {
            "triage": [call("transfer_to_billing", "call_1"), answer("Anything else?")],
            "billing": [call("transfer_to_triage", "call_2")],
        },
        subgraphs=True,
    )
    store = MemoryEventStore()
    done = drive(GraphRun(store, "r1", agents=["triage", "billing"]), g)
    assert (done.status, done.final_output) == ("completed", "Anything else?")
    handoffs = [e.to_agent for e in store.events("r1") if e.type == "handoff"]
    assert handoffs == ["billing", "triage"]
    assert types(store, "r1")[6:14] == [
        "handoff", "model.started", "model.completed", "tool.requested", "tool.started",
        "tool.completed", "handoff", "model.started",
    ]  # fmt: skip
    assert done.record.current_agent == "triage"
    assert validates(store, "r1", tmp_path) == 0


def test_a_handoff_after_an_approval_is_recorded_by_the_run_driven_on(tmp_path: Path) -> None:
    """run(agent="triage") pauses on the transfer call; the resumed stream enters billing: handoff."""
    from langgraph.prebuilt import ToolNode

    triage = app.GenericFakeChatModel(
        messages=iter([call("transfer_to_billing", "call_1")]), disable_streaming=True
    )
    billing = app.GenericFakeChatModel(messages=iter([answer("Refunded.")]))

    def approval(state: MessagesState) -> dict[str, Any]:
        app.approval_request(state["messages"][-1].tool_calls)
        return {}

    g = StateGraph(MessagesState)
    g.add_node("triage", lambda s: {"messages": [triage.invoke(s["messages"])]})
    g.add_node("approval", approval)
    g.add_node("tools", ToolNode([app.transfer_to("billing")]))
    g.add_node("billing", lambda s: {"messages": [billing.invoke(s["messages"])]})
    g.add_edge(START, "triage")
    g.add_edge("triage", "approval")
    g.add_edge("approval", "tools")
    g.add_edge("billing", END)
    compiled = g.compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "t1"}}
    store = MemoryEventStore()
    agents = ["triage", "billing"]
    paused = drive(GraphRun(store, "r1", agents=agents), compiled, cfg, agent="triage")
    assert paused.status == "waiting_approval"
    approve(store, "r1", "call_1", approver="alice")
    with capture_logs():
        done = GraphRun(store, "r1", agents=agents).drive(compiled, cfg)
    assert (done.status, done.final_output) == ("completed", "Refunded.")
    assert types(store, "r1")[3:] == [
        "approval.requested", "approval.accepted", "tool.requested", "tool.started",
        "tool.completed", "handoff", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    assert done.record.current_agent == "billing"
    assert validates(store, "r1", tmp_path) == 0


def test_agents_given_as_one_string_is_refused() -> None:
    """agents="triage" would be six one-letter agents: a TypeError says what to pass."""
    with pytest.raises(TypeError) as err:
        GraphRun(MemoryEventStore(), "r1", agents="triage")
    assert str(err.value) == "agents must be a collection of node names, not the string 'triage'"


def _researcher(*steps: Any) -> Any:
    """The subagent: the weather graph, scripted with `steps`."""
    return graph(list(steps))


def _ask_researcher(parent: GraphRun, child: Any, *, is_async: bool = False) -> Any:
    """A tool that runs `child` (a graph, or one per question) as a subagent of `parent`."""

    def child_for(question: str) -> Any:
        return child(question) if callable(child) else child

    def said(done: Any) -> str:
        if done.status == "completed":
            return str(done.final_output)
        return f"{done.status}: {done.partial_output}"

    def ask(question: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Ask the weather researcher."""
        child_run = parent.subagent(tool_call_id)
        return said(child_run.run(child_for(question), {"messages": [HumanMessage(question)]}))

    async def aask(question: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Ask the weather researcher."""
        child_run = parent.subagent(tool_call_id)
        return said(
            await child_run.arun(child_for(question), {"messages": [HumanMessage(question)]})
        )

    return tool("ask_researcher")(aask if is_async else ask)


def _triage(parent: GraphRun, child: Any, *steps: Any) -> Any:
    """A parent graph whose `ask_researcher` tool runs `child` as a subagent of `parent`."""
    return app.graph_with_tools(list(steps), [_ask_researcher(parent, child)])


def test_an_async_subagent_graph_draws_on_the_parents_budget_through_arun(tmp_path: Path) -> None:
    """astream, async nodes and tool, the child through `arun`: the same stops as in sync."""
    import asyncio

    from langgraph.prebuilt import ToolNode, tools_condition

    store = MemoryEventStore()
    parent = GraphRun(store, "r1")
    model = app.GenericFakeChatModel(
        messages=iter([call("ask_researcher", "call_1", question="Paris?"), answer("never")]),
        disable_streaming=True,
    )
    child_model = app.GenericFakeChatModel(
        messages=iter(
            [call("get_weather", "c1", city="Paris"), call("get_weather", "c2", city="Rome")]
        ),
        disable_streaming=True,
    )

    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def child_agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await child_model.ainvoke(state["messages"])]}

    def weather_graph(node: Any, tools: list[Any]) -> Any:
        g = StateGraph(MessagesState)
        g.add_node("agent", node)
        g.add_node("tools", ToolNode(tools))
        g.add_edge(START, "agent")
        g.add_conditional_edges("agent", tools_condition)
        g.add_edge("tools", "agent")
        return g.compile()

    child = weather_graph(child_agent, [app.get_weather])
    g = weather_graph(agent, [_ask_researcher(parent, child, is_async=True)])
    with capture_logs():
        done = asyncio.run(parent.arun(g, ASK, limits=Limits(max_tokens=40)))
    assert_tree_stopped(done, store, "r1/call_1", tmp_path)
    assert done.record.actions["call_1"].result == "terminated: sunny in Paris"


def test_parallel_tool_calls_run_subagents_that_each_record_only_their_own_run(
    tmp_path: Path,
) -> None:
    """Two calls in one message: ToolNode runs them in threads, each child graph in its own run."""
    from langchain_core.messages import AIMessage

    store = MemoryEventStore()
    parent = GraphRun(store, "r1")
    calls = [
        {"name": "ask_researcher", "args": {"question": city}, "id": f"call_{city}"}
        for city in ("Paris", "Rome")
    ]

    def researcher(city: str) -> Any:
        return _researcher(call("get_weather", f"w_{city}", city=city), answer(f"{city}: sunny."))

    g = app.graph_with_tools(
        [AIMessage("", tool_calls=calls), answer("Both sunny.")],
        [_ask_researcher(parent, researcher)],
    )
    done = drive(parent, g)
    assert (done.status, done.final_output) == ("completed", "Both sunny.")
    assert {aid: a.result for aid, a in done.record.actions.items()} == {
        "call_Paris": "Paris: sunny.",
        "call_Rome": "Rome: sunny.",
    }
    for city in ("Paris", "Rome"):
        assert types(store, f"r1/call_{city}") == [
            "run.started", "model.started", "model.completed", "tool.requested", "tool.started",
            "tool.completed", "model.started", "model.completed", "run.completed",
        ]  # fmt: skip
        assert validates(store, f"r1/call_{city}", tmp_path) == 0
    assert validates(store, "r1", tmp_path) == 0


def test_a_structured_output_call_is_a_final_decision_not_an_action(tmp_path: Path) -> None:
    """with_structured_output's tool call is the model's answer: recorded as final, never run."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from pydantic import BaseModel

    class Intent(BaseModel):
        topic: str

    class ToolFree(GenericFakeChatModel):
        """A scripted chat model that accepts tool schemas (and ignores them)."""

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(**kwargs)

    model = ToolFree(messages=iter([call("Intent", "s1", topic="weather"), answer("Sunny.")]))
    classify = model.with_structured_output(Intent)

    def route(state: MessagesState) -> dict[str, Any]:
        intent = classify.invoke(state["messages"])
        return {"messages": [HumanMessage(f"topic: {intent.topic}")]}

    g = StateGraph(MessagesState)
    g.add_node("classify", route)
    g.add_node("answer", lambda state: {"messages": [model.invoke(state["messages"])]})
    g.add_edge(START, "classify")
    g.add_edge("classify", "answer")
    g.add_edge("answer", END)
    store = MemoryEventStore()
    with capture_logs():
        done = GraphRun(store, "r1").run(g.compile(), {"messages": [HumanMessage("hi")]})
    assert (done.status, done.final_output) == ("completed", "Sunny.")
    completed = [e for e in store.events("r1") if e.type == "model.completed"]
    assert [(e.decision, e.output) for e in completed] == [
        ("final", {"topic": "weather"}),
        ("final", "Sunny."),
    ]
    assert done.record.actions == {}
    assert validates(store, "r1", tmp_path) == 0


def test_pricing_gets_the_model_name_and_a_cost_limit_stops_the_graph(tmp_path: Path) -> None:
    """`response_metadata["model_name"]` reaches `pricing`; 1.0 a call under max_cost=1.5: the
    second call overruns it and the graph stops right after it."""
    seen: list[str | None] = []

    def pricing(model: str | None, input_tokens: int, output_tokens: int) -> float:
        seen.append(model)
        return 1.0

    messages = [call("get_weather", f"call_{i}", city=f"C{i}") for i in range(4)]
    for message in messages:
        message.response_metadata = {"model_name": "gpt-test"}
    store = MemoryEventStore()
    done = drive(
        GraphRun(store, "r1", pricing=pricing), graph(messages), limits=Limits(max_cost=1.5)
    )
    assert (done.status, done.stop_reason, done.record.stop_detail) == (
        "terminated",
        "budget",
        "spent 2 > max cost 1.5",
    )
    assert seen == ["gpt-test", "gpt-test"]
    assert types(store, "r1")[-2:] == ["model.completed", "run.terminated"]
    assert validates(store, "r1", tmp_path) == 1


def test_chunks_of_the_callers_stream_mode_reach_on_chunk_as_langgraph_shapes_them() -> None:
    """stream_mode="messages": the model's messages go to on_chunk; the run is observed as ever."""
    chunks: list[Any] = []
    store = MemoryEventStore()
    g = graph([call("get_weather", "call_1", city="Paris"), answer("Sunny in Paris.")])
    done = drive(GraphRun(store, "r1", stream_mode="messages", on_chunk=chunks.append), g)
    assert done.status == "completed"
    texts = [
        message.content for message, metadata in chunks if metadata["langgraph_node"] == "agent"
    ]
    assert texts[-1] == "Sunny in Paris."
    assert types(store, "r1")[-2:] == ["model.completed", "run.completed"]


def test_a_list_of_modes_reaches_on_chunk_as_mode_chunk_pairs() -> None:
    """["updates", "custom"]: pairs, as graph.stream yields them; a node's custom data included."""
    from langgraph.config import get_stream_writer

    def note(state: MessagesState) -> dict[str, Any]:
        get_stream_writer()({"progress": "looked it up"})
        return {}

    g = StateGraph(MessagesState)
    g.add_node("note", note)
    g.add_node("agent", lambda s: {"messages": [app.GenericFakeChatModel(
        messages=iter([answer("Done.")]), disable_streaming=True
    ).invoke(s["messages"])]})  # fmt: skip
    g.add_edge(START, "note")
    g.add_edge("note", "agent")
    g.add_edge("agent", END)
    chunks: list[Any] = []
    store = MemoryEventStore()
    run_ = GraphRun(store, "r1", stream_mode=["updates", "custom"], on_chunk=chunks.append)
    assert drive(run_, g.compile()).status == "completed"
    assert ("custom", {"progress": "looked it up"}) in chunks
    assert [mode for mode, _ in chunks].count("updates") == 2  # note, agent


def test_an_async_run_awaits_an_async_on_chunk() -> None:
    """arun: an async on_chunk is awaited, chunk by chunk."""
    seen: list[str] = []

    async def on_chunk(chunk: Any) -> None:
        await asyncio.sleep(0)
        seen.extend(chunk)

    store = MemoryEventStore()
    run_ = GraphRun(store, "r1", stream_mode="updates", on_chunk=on_chunk)
    with capture_logs():
        done = asyncio.run(run_.arun(graph([answer("Hi.")]), ASK))
    assert (done.status, seen) == ("completed", ["agent"])


def test_a_stream_mode_without_on_chunk_is_refused() -> None:
    """Nothing would receive the chunks: said when the run is built."""
    with pytest.raises(ValueError, match=r"^stream_mode='messages' needs on_chunk to receive"):
        GraphRun(MemoryEventStore(), "r1", stream_mode="messages")


@pytest.mark.parametrize("as_manager", [False, True], ids=["list", "manager"])
def test_the_callers_own_callbacks_still_hear_the_graph(as_manager: bool) -> None:
    """config["callbacks"] as a list or a CallbackManager: ours are added, theirs kept."""
    from langchain_core.callbacks import BaseCallbackHandler, CallbackManager

    heard: list[str] = []

    class Mine(BaseCallbackHandler):
        def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
            heard.append(f"tool {kwargs.get('name') or serialized.get('name')}")

    mine = Mine()
    callbacks: Any = CallbackManager([mine], inheritable_handlers=[mine]) if as_manager else [mine]
    store = MemoryEventStore()
    g = graph([call("get_weather", "call_1", city="Paris"), answer("Sunny.")])
    done = drive(GraphRun(store, "r1"), g, {"callbacks": callbacks})
    assert (done.status, heard) == ("completed", ["tool get_weather"])
    assert "tool.completed" in types(store, "r1")


def test_a_router_that_reads_a_tool_call_without_running_it_is_recorded_as_declined(
    tmp_path: Path,
) -> None:
    """The supervisor's `to_billing` call only picks the next node: the ledger says it never ran."""
    supervisor = app.GenericFakeChatModel(
        messages=iter([call("to_billing", "route_1", reason="invoice")]), disable_streaming=True
    )
    billing = app.GenericFakeChatModel(
        messages=iter([answer("Invoice sent.")]), disable_streaming=True
    )

    def route(state: MessagesState) -> str:
        return "billing" if state["messages"][-1].tool_calls[0]["name"] == "to_billing" else END

    g = StateGraph(MessagesState)
    g.add_node("supervisor", lambda s: {"messages": [supervisor.invoke(s["messages"])]})
    g.add_node("billing", lambda s: {"messages": [billing.invoke(s["messages"][:1])]})
    g.add_edge(START, "supervisor")
    g.add_conditional_edges("supervisor", route, ["billing", END])
    g.add_edge("billing", END)
    store = MemoryEventStore()
    run_ = GraphRun(store, "r1", agents=["supervisor", "billing"])
    done = drive(run_, g.compile(), agent="supervisor")
    assert (done.status, done.final_output, done.record.current_agent) == (
        "completed",
        "Invoice sent.",
        "billing",
    )
    action = done.record.actions["route_1"]
    assert (action.status, action.approver, action.reason) == (
        "rejected",
        "langgraph",
        "the graph went on without running this call",
    )
    assert types(store, "r1") == [
        "run.started", "model.started", "model.completed", "handoff", "approval.requested",
        "approval.rejected", "model.started", "model.completed", "run.completed",
    ]  # fmt: skip
    assert validates(store, "r1", tmp_path) == 0


def test_a_cancel_as_the_graph_ends_ends_the_run_cancelled(tmp_path: Path) -> None:
    """A node asks to cancel after its answer and the graph ends: cancelled, not an error."""
    store = MemoryEventStore()
    model = app.GenericFakeChatModel(messages=iter([answer("Bye.")]), disable_streaming=True)

    def agent(state: MessagesState) -> dict[str, Any]:
        reply = model.invoke(state["messages"])
        cancel(store, "r1", reason="closed the tab")
        return {"messages": [reply]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    done = drive(GraphRun(store, "r1"), g.compile())
    assert (done.status, done.record.cancel_reason, done.partial_output) == (
        "cancelled",
        "closed the tab",
        "Bye.",
    )
    assert validates(store, "r1", tmp_path) == 0
