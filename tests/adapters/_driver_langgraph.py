"""The scenarios' driver for LangGraph: a model node, an approval node and a `ToolNode`."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, ClassVar

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command
from structlog.testing import capture_logs

from agentfsm.adapters.langgraph import GraphRun, approval_request
from agentfsm.events import Limits
from agentfsm.stores.base import EventStore
from tests.adapters._drivers import AgentSpec, Say, Step, Sub

_TOKENS = {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}


def _message(step: Step) -> AIMessage:
    if isinstance(step, Say):
        return AIMessage(content=step.text, usage_metadata=_TOKENS)  # type: ignore[arg-type]
    calls = [{"name": c.tool, "args": c.args, "id": c.call_id, "type": "tool_call"} for c in step]
    return AIMessage(content="", tool_calls=calls, usage_metadata=_TOKENS)  # type: ignore[arg-type]


class LangGraphDriver:
    """Builds agent → (approval →) tools → agent ...; subagents are graphs run by `delegate`.

    The top graph checkpoints to `runs.db` in `workdir` (the file the scenarios' SQLite
    store uses too: one file holds both), its thread the run's id; a subagent graph has no
    checkpointer (its state is in its caller's). The approval node puts the calls to tools
    that need approval to a person (`approval_request`); a rejected call's reason goes to
    the model as its result.
    """

    name = "langgraph"
    state_name = None
    failed_kind = "ValueError"
    refused_call_tokens = 0
    approval_signal = "langgraph __interrupt__"
    corrupt_state = (b"", "")
    cannot: ClassVar[Mapping[str, str]] = {
        "kept_state": "the graph's state is in its checkpointer, not kept in our store "
        "(a mismatched call is tested in test_langgraph with an interrupt for other arguments)",
        "mixed_batch": "the approval node holds the whole batch: no call runs before the pause",
        "unstorable_result": "ToolNode makes a tool's result message text before the adapter "
        "sees it (NaN becomes the text 'NaN'): every result is storable",
    }

    def __init__(self, workdir: Path) -> None:
        self.saver = SqliteSaver(sqlite3.connect(workdir / "runs.db", check_same_thread=False))
        #: The tool messages each agent's model was last called with, by the agent's name.
        self.shown: dict[str, dict[str, str]] = {}

    def build(self, spec: AgentSpec, run: GraphRun, *, top: bool = True) -> Any:
        """The compiled graph `spec` describes, its subagents delegated to under `run`."""
        model = GenericFakeChatModel(
            messages=iter([_message(s) for s in spec.steps]), disable_streaming=True
        )
        tools: list[BaseTool] = [tool(t.name)(t.fn) for t in spec.tools]
        tools += [self._asking(sub, run) for sub in spec.subagents]
        gated = {t.name for t in spec.tools if t.needs_approval}

        def agent(state: MessagesState) -> dict[str, Any]:
            self.shown[spec.name] = {
                m.tool_call_id: str(m.content)
                for m in state["messages"]
                if isinstance(m, ToolMessage)
            }
            return {"messages": [model.invoke(state["messages"])]}

        def approve_calls(state: MessagesState) -> Command[str]:
            asked = [c for c in state["messages"][-1].tool_calls if c["name"] in gated]
            if not asked:
                return Command(goto="tools")
            rejected = [
                ToolMessage(d["reason"] or "rejected", tool_call_id=cid)
                for cid, d in approval_request(asked).items()
                if not d["approved"]
            ]
            if rejected:
                return Command(goto="agent", update={"messages": rejected})
            return Command(goto="tools")

        g = StateGraph(MessagesState)
        g.add_node("agent", agent)
        g.add_node("tools", ToolNode(tools, handle_tool_errors=True))
        g.set_entry_point("agent")
        if gated:
            g.add_node("approval", approve_calls)
            g.add_conditional_edges("agent", tools_condition, {"tools": "approval", END: END})
        else:
            g.add_conditional_edges("agent", tools_condition)
        g.add_edge("tools", "agent")
        return g.compile(checkpointer=self.saver if top else None)

    def _asking(self, sub: Sub, run: GraphRun) -> BaseTool:
        child = self.build(sub.agent, run, top=False)

        def ask(question: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Any:
            """Ask the subagent."""
            messages = {"messages": [HumanMessage(question)]}
            return run.delegate(tool_call_id, child, messages, agent=sub.agent.name)

        return tool(sub.tool)(ask)

    def _config(self, run_id: str) -> dict[str, Any]:
        return {"configurable": {"thread_id": run_id}}

    def run(self, store: EventStore, run_id: str, spec: AgentSpec, *, prompt: str = "weather?",
            limits: Limits | None = None, **options: Any) -> Any:  # fmt: skip
        """`GraphRun.run`."""
        run = GraphRun(store, run_id, **options)
        with capture_logs():
            return run.run(
                self.build(spec, run),
                {"messages": [HumanMessage(prompt)]},
                self._config(run_id),
                objective=prompt,
                agent=spec.name,
                limits=limits,
            )

    def drive(self, store: EventStore, run_id: str, spec: AgentSpec, state: Any = None,
              **options: Any) -> Any:  # fmt: skip
        """`GraphRun.drive` (`state` is ignored: the checkpointer holds the graph's)."""
        run = GraphRun(store, run_id, **options)
        with capture_logs():
            return run.drive(self.build(spec, run), self._config(run_id))

    def run_without_loop(self, store: EventStore, run_id: str, spec: AgentSpec, prompt: str) -> Any:
        """`GraphRun.run` (LangGraph's own API is synchronous)."""
        return self.run(store, run_id, spec, prompt=prompt)

    def drive_without_loop(self, store: EventStore, run_id: str, spec: AgentSpec) -> Any:
        """`GraphRun.drive`."""
        return self.drive(store, run_id, spec)

    def state_text(self, paused: Any) -> str:
        """Nothing: the graph's state is in its checkpointer."""
        return ""

    def state_from_text(self, text: str) -> Any:
        """Nothing to pass: `drive` reads the checkpointer."""
        return None

    def seen(self, agent: str) -> dict[str, str]:
        """The `ToolMessage`s of the model node's last call."""
        return dict(self.shown[agent])
