"""The graphs the LangGraph adapter tests drive: a model node, an approval node, a ToolNode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, tool
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


@tool
def refund(order_id: str) -> str:
    """Refund an order."""
    CALLS.append(f"refund {order_id}")
    return f"refunded {order_id}"


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
    return graph_with_tools(
        messages,
        [get_weather],
        approval=approval,
        checkpointer=checkpointer,
        handle_tool_errors=handle_tool_errors,
    )


def graph_with_tools(
    messages: Sequence[AIMessage],
    tools: Sequence[BaseTool],
    *,
    approval: bool = False,
    checkpointer: Any = None,
    handle_tool_errors: bool = True,
) -> Any:
    """`graph` with other tools than `get_weather`."""
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
    g.add_node("tools", ToolNode(tools, handle_tool_errors=handle_tool_errors))
    g.add_edge(START, "agent")
    if approval:
        g.add_node("approval", approve_calls)
        g.add_conditional_edges("agent", tools_condition, {"tools": "approval", END: END})
    else:
        g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(checkpointer=checkpointer)


def transfer_to(agent: str, *, parent: bool = False) -> BaseTool:
    """A handoff tool as langgraph-swarm writes it: `Command(goto=agent)` plus its ToolMessage.

    `parent`: the tool runs in an agent's subgraph, so the command goes to the parent graph.
    """

    def transfer(tool_call_id: Annotated[str, InjectedToolCallId]) -> Command[str]:
        return Command(
            goto=agent,
            graph=Command.PARENT if parent else None,
            update={
                "messages": [ToolMessage(f"Transferred to {agent}", tool_call_id=tool_call_id)]
            },
        )

    return tool(f"transfer_to_{agent}", description=f"Hand the user over to {agent}.")(transfer)


def swarm(scripts: Mapping[str, Sequence[AIMessage]], *, subgraphs: bool = False) -> Any:
    """Agent nodes (the first one entered first) that hand off with `transfer_to_<agent>` tools.

    Flat (default): each agent is a model node; one ToolNode runs every transfer tool and
    its `Command(goto=...)` moves to the agent. `subgraphs=True`: each agent is its own
    compiled model + ToolNode graph, whose transfer tools send `Command.PARENT` (the swarm way).
    """
    names = list(scripts)
    g = StateGraph(MessagesState)
    for name, script in scripts.items():
        model = GenericFakeChatModel(messages=iter(script), disable_streaming=True)
        tools = [transfer_to(other, parent=subgraphs) for other in names if other != name]
        if subgraphs:
            g.add_node(name, _react(name, model, tools), destinations=tuple(names))
        else:
            g.add_node(name, _model_node(model))
            g.add_conditional_edges(name, tools_condition)
    if not subgraphs:
        g.add_node("tools", ToolNode([transfer_to(name) for name in names]))
    g.add_edge(START, names[0])
    return g.compile()


def _model_node(model: GenericFakeChatModel) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    return agent


def _react(name: str, model: GenericFakeChatModel, tools: Sequence[BaseTool]) -> Any:
    g = StateGraph(MessagesState)
    g.add_node("agent", _model_node(model))
    g.add_node("tools", ToolNode(tools))
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", tools_condition)
    g.add_edge("tools", "agent")
    return g.compile(name=name)


def manager_graph(
    run: Any, checkpointer: Any, *, resumed: bool = False, is_async: bool = False
) -> Any:
    """A manager whose tool `refunds` delegates to a refunds graph that asks for approval.

    The refunds graph has no checkpointer of its own: its state is in the manager's.
    `resumed`: as a new process builds them, with only the answers after the refund left.
    """
    child_steps = [] if resumed else [call("refund", "call_r1", order_id="O-1")]
    child = graph_with_tools([*child_steps, answer("O-1 refunded.")], [refund], approval=True)

    def ask(question: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Any:
        """Ask the refunds agent."""
        messages = {"messages": [HumanMessage(question)]}
        return run.delegate(tool_call_id, child, messages, agent="refunds")

    async def aask(question: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> Any:
        """Ask the refunds agent."""
        messages = {"messages": [HumanMessage(question)]}
        return await run.adelegate(tool_call_id, child, messages, agent="refunds")

    refunds = tool("refunds")(aask if is_async else ask)
    steps = [] if resumed else [call("refunds", "call_m1", question="refund O-1")]
    return graph_with_tools(
        [*steps, answer("The refund is done.")], [refunds], checkpointer=checkpointer
    )
