"""A guard's stop of a LangGraph run is a result, not an error: nothing is printed for it."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import textwrap

import pytest

#: A runaway graph (a model asking for a tool forever), stopped by `MaxTurns(2)`.
GRAPH = textwrap.dedent(
    """
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from agentfsm import MaxTurns, SQLiteEventStore
    from agentfsm.adapters.langgraph import GraphRun


    @tool
    def get_order(order_id: str) -> str:
        \"\"\"Look an order up.\"\"\"
        return "paid"


    def app():
        model = GenericFakeChatModel(messages=iter([
            AIMessage("", tool_calls=[{"name": "get_order", "args": {"order_id": f"O-{i}"},
                                       "id": f"call_{i}"}])
            for i in range(9)
        ]))
        graph = StateGraph(MessagesState)
        graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
        graph.add_node("tools", ToolNode([get_order]))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        return graph.compile()


    def graph_run():
        return GraphRun(SQLiteEventStore(":memory:"), "r1", guards=[MaxTurns(2)])


    INPUT = {"messages": [HumanMessage("Where is O-1?")]}
    """
)

CALLBACK_LOGGER = "langchain_core.callbacks.manager"


def _namespace() -> dict[str, object]:
    pytest.importorskip("langgraph")
    namespace: dict[str, object] = {"__name__": "quiet"}
    exec(compile(GRAPH, "quiet", "exec"), namespace)
    return namespace


def test_a_guard_stop_prints_nothing() -> None:
    """In a fresh interpreter with nothing configured: no LangChain warning on stderr."""
    pytest.importorskip("langgraph")
    code = GRAPH + textwrap.dedent(
        """
        done = graph_run().run(app(), INPUT)
        print(done.status, done.stop_reason)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert (done.stdout, done.stderr) == ("terminated max_turns\n", "")


def test_no_callback_warning_is_logged_for_the_stop(caplog: pytest.LogCaptureFixture) -> None:
    """LangChain's "Error in _Handler... callback: GuardStop(...)" is dropped (sync stream)."""
    ns = _namespace()
    with caplog.at_level(logging.WARNING):
        done = ns["graph_run"]().run(ns["app"](), ns["INPUT"])  # type: ignore[operator]
    assert (done.status, done.stop_reason) == ("terminated", "max_turns")
    assert [r.getMessage() for r in caplog.records if r.name == CALLBACK_LOGGER] == []


def test_no_callback_warning_is_logged_for_the_stop_async(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The same for `arun` (LangChain's async callback path logs the same warning)."""
    ns = _namespace()
    with caplog.at_level(logging.WARNING):
        run = ns["graph_run"]().arun(ns["app"](), ns["INPUT"])  # type: ignore[operator]
        done = asyncio.run(run)
    assert (done.status, done.stop_reason) == ("terminated", "max_turns")
    assert [r.getMessage() for r in caplog.records if r.name == CALLBACK_LOGGER] == []
    assert logging.getLogger(CALLBACK_LOGGER).filters == []  # removed after the stream


def test_other_errors_of_the_handler_still_warn() -> None:
    """Only the stop and the refused calls the handler raised on purpose are silenced; any
    other error is not."""
    pytest.importorskip("langgraph")
    from agentfsm.adapters._langgraph_signals import RefusedCallError, _IntendedStop

    stop = RuntimeError("stop")
    # Stands in for a `_Handler` that raised `stop`: the filter reads its class name and stop.
    handler = type("_Handler", (), {"stop": stop})()
    quiet = _IntendedStop(handler)

    def record(error: Exception, name: str = "_Handler") -> logging.LogRecord:
        return logging.LogRecord(
            CALLBACK_LOGGER,
            logging.WARNING,
            __file__,
            1,
            "Error in %s.%s callback: %s",
            (name, "on_chat_model_start", repr(error)),
            None,
        )

    assert quiet.filter(record(stop)) is False
    assert quiet.filter(record(RefusedCallError("r1", "call_1", "too many calls"))) is False
    assert quiet.filter(record(ValueError("a bug"))) is True
    assert quiet.filter(record(stop, name="SomeoneElsesHandler")) is True


def test_a_refused_answers_calls_print_nothing_and_reach_the_model() -> None:
    """100 calls over the cap of 64, through a plain `ToolNode` (its default error handling):
    each is refused before it runs, its error message is the refusal, which the model reads,
    and nothing is printed for the 100 errors the handler raised on purpose."""
    pytest.importorskip("langgraph")
    code = textwrap.dedent(
        """
        import json

        from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        from langchain_core.tools import tool
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition

        from agentfsm import SQLiteEventStore
        from agentfsm.adapters.langgraph import GraphRun

        ran = []

        @tool
        def get_order(order_id: str) -> str:
            \"\"\"Look an order up.\"\"\"
            ran.append(order_id)
            return "paid"

        calls = [{"name": "get_order", "args": {"order_id": f"O-{i}"}, "id": f"call_{i}"}
                 for i in range(100)]
        model = GenericFakeChatModel(messages=iter([AIMessage("", tool_calls=calls),
                                                    AIMessage("One at a time.")]))
        shown = []

        def agent(state):
            shown[:] = [m for m in state["messages"] if isinstance(m, ToolMessage)]
            return {"messages": [model.invoke(state["messages"])]}

        graph = StateGraph(MessagesState)
        graph.add_node("agent", agent)
        graph.add_node("tools", ToolNode([get_order]))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        run = GraphRun(SQLiteEventStore(":memory:"), "r1")
        done = run.run(graph.compile(), {"messages": [HumanMessage("Refund them all")]})
        seen = sorted({(m.status, m.content) for m in shown})
        print(json.dumps([done.status, done.record.last_decision, len(ran), len(shown), seen]))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    message = (
        "100 calls proposed in one decision; at most 64 are allowed: none of them ran, "
        "propose at most 64 at a time"
    )
    assert (json.loads(done.stdout), done.stderr) == (
        ["completed", "final", 0, 100, [["error", message]]],
        "",
    )
