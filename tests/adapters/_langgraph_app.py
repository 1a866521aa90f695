"""The graphs the LangGraph adapter tests drive: a model node, an approval node, a ToolNode."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command

from agentfsm.adapters.langgraph import approval_request

CALLS: list[str] = []


@tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    CALLS.append(f"get_weather {city}")
    if city == "Atlantis":
        raise ValueError("no such city")
    return f"sunny in {city}"


def call(name: str, call_id: str, **args: Any) -> AIMessage:
    """A model message asking for one tool call (10 input, 5 output tokens)."""
    return AIMessage(
        content="",
        tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}],
        usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
    )


def answer(text: str) -> AIMessage:
    """A model message with a final answer (10 input, 5 output tokens)."""
    return AIMessage(
        content=text, usage_metadata={"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    )


def graph(
    messages: Sequence[AIMessage],
    *,
    approval: bool = False,
    checkpointer: Any = None,
    handle_tool_errors: bool = True,
) -> Any:
    """agent → (approval →) tools → agent ... with a scripted fake chat model."""
    model = GenericFakeChatModel(messages=iter(messages), disable_streaming=True)

    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def approve_calls(state: MessagesState) -> Command[str]:
        last = state["messages"][-1]
        decisions = approval_request(last.tool_calls)
        rejected = [
            ToolMessage(d["reason"] or "rejected", tool_call_id=cid)
            for cid, d in decisions.items()
            if not d["approved"]
        ]
        if rejected:
            return Command(goto="agent", update={"messages": rejected})
        return Command(goto="tools")

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("tools", ToolNode([get_weather], handle_tool_errors=handle_tool_errors))
    g.add_edge(START, "agent")
    if approval:
        g.add_node("approval", approve_calls)
        g.add_conditional_edges("agent", tools_condition, {"tools": "approval", END: END})
    else:
        g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


def _main(db: str, checkpoints: str, run_id: str) -> None:
    """Resume `run_id` in this new process, from our store and the graph's SQLite saver."""
    import json
    import socket
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from structlog.testing import capture_logs

    from agentfsm.adapters.langgraph import GraphRun
    from agentfsm.adapters.stores import SQLiteEventStore

    def refuse(self: socket.socket, address: object) -> None:
        raise RuntimeError(f"network access attempted: {address!r}")

    socket.socket.connect = refuse  # type: ignore[method-assign]
    saver = SqliteSaver(sqlite3.connect(checkpoints, check_same_thread=False))
    g = graph([answer("Done.")], approval=True, checkpointer=saver)
    with capture_logs():
        done = GraphRun(SQLiteEventStore(db), run_id).resume(
            g, {"configurable": {"thread_id": run_id}}
        )
    print(json.dumps({"status": done.status, "final_output": done.final_output, "calls": CALLS}))


if __name__ == "__main__":
    import sys

    _main(*sys.argv[1:4])
