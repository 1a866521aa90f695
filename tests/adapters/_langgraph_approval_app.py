"""A LangGraph agent with `approval_node`, over `ChatOpenAI` and the fake OpenAI API, driven by
`GraphRun` in a process of its own: `python -m tests.adapters._langgraph_approval_app WORKDIR
BASE_URL run|resume` prints the run's outcome as JSON (the test's other processes decide).

The graph: agent (ChatOpenAI) -> approval (`approval_node(needs_approval={"refund"})`) ->
tools (`ToolNode`) -> agent; checkpointed in `WORKDIR/runs.db`, the file our SQLite store
uses too. The tools write each call they run to `WORKDIR/ran.txt`.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from agentfsm.adapters.langgraph import GraphRun, approval_node
from agentfsm.stores import SQLiteEventStore


def graph(workdir: Path, base_url: str) -> Any:
    ran = workdir / "ran.txt"

    @tool
    def get_order(order_id: str) -> str:
        """Look an order up."""
        with ran.open("a") as f:
            f.write(f"get_order {order_id}\n")
        return f"{order_id}: paid"

    @tool
    def refund(order_id: str) -> str:
        """Refund an order."""
        with ran.open("a") as f:
            f.write(f"refund {order_id}\n")
        return f"refunded {order_id}"

    llm = ChatOpenAI(model="gpt-4.1", base_url=base_url, api_key="test", max_retries=0)
    model = llm.bind_tools([get_order, refund])
    g = StateGraph(MessagesState)
    g.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
    g.add_node("approval", approval_node(needs_approval={"refund"}))
    g.add_node("tools", ToolNode([get_order, refund]))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition, {"tools": "approval", END: END})
    g.add_edge("tools", "agent")
    saver = SqliteSaver(sqlite3.connect(workdir / "runs.db", check_same_thread=False))
    return g.compile(checkpointer=saver)


def main(workdir: Path, base_url: str, what: str) -> None:
    store = SQLiteEventStore(workdir / "runs.db")
    run = GraphRun(store, "r1")
    app = graph(workdir, base_url)
    config = {"configurable": {"thread_id": "r1"}}
    if what == "run":
        done = run.run(app, {"messages": [HumanMessage("refund O-1 and O-2")]}, config)
    else:
        done = run.drive(app, config)
    print(json.dumps({"status": done.status, "final_output": done.final_output,
                      "pending": [p.action_id for p in done.pending_approvals]}))  # fmt: skip


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
