"""`approval_node`: a LangGraph node that puts a model's calls to a person, call by call.

A graph with approvals needs a node between the model and its tools that asks for the calls
that need approval and then acts on each decision. Written by hand it is easy to get wrong
(sending any rejection straight back to the model means the approved calls of the same
answer never run), so the adapter ships one:

- the calls that need no approval, and the approved ones, run (one `Send` of them to the
  tools node: a `ToolNode` runs exactly those);
- each rejected call is answered with a `ToolMessage` carrying its reason, which the model
  reads;
- while any call that needs approval is undecided, the graph pauses (`approval_request`:
  `interrupt()`), and the whole answer waits — nothing of it runs before the person's
  decisions are in, so a resume never runs a call twice.

Decisions are made in our store (`approve` / `reject`, `agentfsm approve`, from any process)
and read back by `approval_request` from the run's ledger on resume.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langgraph.types import Command, Send

from agentfsm.adapters._langgraph_signals import approval_request

__all__ = ["NeedsApproval", "approval_node"]

#: Which calls need a person's approval: tool names, or `fn(name, args) -> bool`.
NeedsApproval = Collection[str] | Callable[[str, dict[str, Any]], bool]


def _gate(needs_approval: NeedsApproval | None) -> Callable[[str, dict[str, Any]], bool]:
    if needs_approval is None:
        return lambda name, args: True
    if callable(needs_approval):
        return needs_approval
    if isinstance(needs_approval, str):
        raise TypeError(
            f"needs_approval must be a collection of tool names or a function, "
            f"got the string {needs_approval!r} (write {{{needs_approval!r}}})"
        )
    names = frozenset(needs_approval)
    return lambda name, args: name in names


def approval_node(
    needs_approval: NeedsApproval | None = None,
    *,
    tools: str = "tools",
    agent: str = "agent",
    messages_key: str = "messages",
) -> Callable[[dict[str, Any]], Command[Any]]:
    """A node that asks for approval of the last model answer's calls and acts on the answers.

    Put it between the model's node and a `ToolNode`: route the model's tool calls to it
    (`add_conditional_edges(agent, tools_condition, {"tools": "approval", END: END})`) and
    keep the edge from the tools back to the model. It pauses the graph (`interrupt()`) until
    every call that needs approval is decided in our store, then sends the free and approved
    calls to `tools` and answers each rejected one with a `ToolMessage` of its reason; an
    answer whose calls were all rejected goes back to `agent`, which reads why.

    Args:
        needs_approval: the tool names that need approval, or `fn(name, args) -> bool`;
            None (the default): every call.
        tools: the name of the node that runs the calls (a `ToolNode`).
        agent: the name of the model's node (where an answer goes when nothing runs).
        messages_key: the state's messages key (`MessagesState`: "messages").
    """
    gated = _gate(needs_approval)

    def approval(state: dict[str, Any] | Any) -> Command[Any]:
        messages: Sequence[Any] = (
            state[messages_key] if isinstance(state, dict) else getattr(state, messages_key)
        )
        last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
        calls: list[dict[str, Any]] = (
            [{**c, "id": str(c["id"])} for c in last.tool_calls] if last is not None else []
        )
        asked = [c for c in calls if gated(c["name"], c["args"])]
        decisions = approval_request(asked) if asked else {}
        rejected = [
            ToolMessage(
                content=decisions[c["id"]].get("reason") or "rejected",
                tool_call_id=c["id"],
                name=c["name"],
                status="error",
            )
            for c in asked
            if not decisions[c["id"]]["approved"]
        ]
        refused = {m.tool_call_id for m in rejected}
        run = [{**c, "type": "tool_call"} for c in calls if c["id"] not in refused]
        update = {messages_key: rejected} if rejected else None
        if not run:
            return Command(goto=agent, update=update)
        return Command(goto=Send(tools, run), update=update)

    return approval
