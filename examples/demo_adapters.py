"""The SDK adapters' demo: four agent SDKs' real runners, offline, on our SQLite store.

    python examples/demo_adapters.py [--dir DIR] [--export adapters.jsonl]

- OpenAI Agents SDK (`sdk-openai`): one response asks for a lookup and a refund that needs
  approval; the SDK runs the lookup, the run waits; a person approves in our store; a
  fresh `AgentsRun` drives it on from the store alone and the refund runs.
- OpenAI Agents SDK, a subagent (`sdk-subagent`): a manager asks its refunds agent through
  `agent_tool`; the refunds agent's call needs approval, so both runs wait; a person decides
  in the subagent's run (`sdk-subagent/call_ask`); driving the manager on goes on with both.
- LangGraph (`sdk-langgraph`): a triage node routes to a billing node; `agents=[...]`
  records the move as a handoff.
- pydantic-ai (`sdk-pydantic-ai`): a model that never stops, stopped by a token budget
  before the call that could overspend it (each call reserves its estimate).
- Claude Agent SDK (`sdk-claude`): the SDK's own client over a scripted CLI
  (`agentfsm.testing.fixtures.claude_transport`); a refund is deferred for approval, approved in our
  store, and a fresh `ClaudeRun` resumes the SDK session our store kept.

`--export` writes the runs' events as JSON Lines: `agentfsm validate`, `replay` and
`diagram --run` read them exactly as a native run's.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "runtime"))
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")  # offline: no trace export

from kit import demo_main, open_store, path_of  # noqa: E402

from agentfsm.events import Limits, dump_event  # noqa: E402
from agentfsm.runtime import approve  # noqa: E402
from agentfsm.stores import EventStore  # noqa: E402

RUNS = ("sdk-openai", "sdk-subagent", "sdk-langgraph", "sdk-pydantic-ai", "sdk-claude")


def openai_run(store: EventStore) -> None:
    """A mixed batch, an approval given in our store, a drive from the store alone."""
    from agents import Agent, function_tool, set_tracing_disabled
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentfsm.adapters.openai_agents import AgentsRun

    set_tracing_disabled(True)

    @function_tool
    def get_order(order_id: str) -> str:
        """Look an order up."""
        return f"{order_id}: paid, not shipped"

    @function_tool(needs_approval=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        return f"refunded {order_id}"

    def agent(*steps: Any) -> Agent[Any]:  # every process builds the same agent
        return Agent(name="support", model=ScriptedModel(list(steps)), tools=[get_order, refund])

    first = agent(
        [
            function_call("get_order", {"order_id": "O-7"}, call_id="call_lookup"),
            function_call("refund", {"order_id": "O-7"}, call_id="call_refund"),
        ]
    )
    paused = AgentsRun(store, "sdk-openai").run(first, "Refund O-7 if it is paid")
    print(f"   paused: {paused.status}, waiting for {list(paused.record.pending_approvals)}")
    approve(store, "sdk-openai", "call_refund", approver="alice")  # or: agentfsm approve
    later = agent([assistant_message("O-7 was paid; it is refunded.")])
    AgentsRun(store, "sdk-openai").drive(later)


def subagent_run(store: EventStore) -> None:
    """A subagent's approval pauses its caller; decided in the subagent's run; both go on."""
    from agents import Agent, function_tool
    from agents.testing import ScriptedModel, assistant_message, function_call

    from agentfsm.adapters.openai_agents import AgentsRun

    @function_tool(needs_approval=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        return f"refunded {order_id}"

    def manager(run: AgentsRun, *steps: Any, child: tuple[Any, ...]) -> Agent[Any]:
        refunds = Agent(name="refunds", model=ScriptedModel(list(child)), tools=[refund])
        tool = run.agent_tool(refunds, tool_name="ask_refunds")
        return Agent(name="manager", model=ScriptedModel(list(steps)), tools=[tool])

    run = AgentsRun(store, "sdk-subagent")
    paused = run.run(
        manager(
            run,
            [function_call("ask_refunds", {"input": "refund O-9"}, call_id="call_ask")],
            child=([function_call("refund", {"order_id": "O-9"}, call_id="call_refund")],),
        ),
        "Refund O-9",
    )
    (pending,) = paused.pending_approvals  # the child's call, decided in the child's run
    child_id, call_id = pending.run_id, pending.action_id
    print(f"   paused: {paused.status}, waiting for {call_id} in {child_id}")
    # Bound to the call's digest: if the call changed since it was reviewed, nothing runs.
    approve(store, child_id, call_id, approver="alice", digest=pending.arguments_digest)
    run = AgentsRun(store, "sdk-subagent")  # a new process would build the same
    run.drive(
        manager(
            run,
            [assistant_message("O-9 is refunded.")],
            child=([assistant_message("Refunded O-9.")],),
        )
    )
    for line in path_of(store, child_id):
        print(f"   {child_id}: {line.strip()}")


def langgraph_run(store: EventStore) -> None:
    """Two agent nodes; moving from one to the other is a handoff."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.graph import END, START, MessagesState, StateGraph

    from agentfsm.adapters.langgraph import GraphRun

    def model(text: str) -> GenericFakeChatModel:
        return GenericFakeChatModel(messages=iter([AIMessage(text)]), disable_streaming=True)

    triage, billing = model("A billing question."), model("Your invoice is attached.")
    graph = StateGraph(MessagesState)
    graph.add_node("triage", lambda s: {"messages": [triage.invoke(s["messages"])]})
    graph.add_node("billing", lambda s: {"messages": [billing.invoke(s["messages"])]})
    graph.add_edge(START, "triage")
    graph.add_edge("triage", "billing")
    graph.add_edge("billing", END)
    run = GraphRun(store, "sdk-langgraph", agents=["triage", "billing"])
    run.run(graph.compile(), {"messages": [HumanMessage("Where is my invoice?")]}, agent="triage")


def pydantic_ai_run(store: EventStore) -> None:
    """A runaway model, stopped before the call that could overspend its token budget."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import RequestUsage

    from agentfsm.adapters.pydantic_ai import AgentIterRun

    def runaway(messages: Any, info: Any) -> ModelResponse:
        n = len(messages)
        call = ToolCallPart("get_order", {"order_id": f"O-{n}"}, tool_call_id=f"call_{n}")
        return ModelResponse(parts=[call], usage=RequestUsage(input_tokens=600, output_tokens=100))

    agent: Agent[None, str] = Agent(FunctionModel(runaway), name="support")

    @agent.tool_plain
    def get_order(order_id: str) -> str:
        """Look an order up."""
        return f"{order_id}: paid, not shipped"

    run = AgentIterRun(store, "sdk-pydantic-ai", reserve_tokens=700)
    asyncio.run(run.arun(agent, "Where is O-1?", limits=Limits(max_tokens=1_500)))


def claude_run(store: EventStore, sessions: Path) -> None:
    """A refund deferred by the CLI for approval, approved in our store, resumed afresh."""
    from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool

    from agentfsm.adapters.claude_agent_sdk import ClaudeRun
    from agentfsm.testing.fixtures.claude_transport import Answer, Use, scripted_cli

    @tool("refund", "Refund an order", {"order_id": str})
    async def refund(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": f"refunded {args['order_id']}"}]}

    options = ClaudeAgentOptions(
        mcp_servers={"shop": create_sdk_mcp_server("shop", tools=[refund])}
    )
    cli = scripted_cli(  # the model's answers; a real run leaves `transport=` out
        [
            Answer(uses=(Use("toolu_refund", "mcp__shop__refund", {"order_id": "O-1"}),)),
            Answer("Refunded O-1."),
        ],
        sessions=sessions,
    )
    needs = {"mcp__shop__refund"}
    run = ClaudeRun(store, "sdk-claude", needs_approval=needs)
    paused = asyncio.run(run.arun("Refund O-1", options, agent="support", transport=cli))
    print(f"   paused: {paused.status}, waiting for {list(paused.record.pending_approvals)}")
    approve(store, "sdk-claude", "toolu_refund", approver="alice")
    fresh = ClaudeRun(store, "sdk-claude", needs_approval=needs)  # as another process would
    asyncio.run(fresh.adrive(options, transport=cli))


def run_all(workdir: Path, export: Path | None = None) -> dict[str, str]:
    """Run the four SDKs on `workdir/runs.db`; each run's status by id."""
    statuses: dict[str, str] = {}
    with open_store(workdir / "runs.db") as store:

        def claude(store: EventStore) -> None:
            claude_run(store, workdir / "claude-sessions")

        drives = (openai_run, subagent_run, langgraph_run, pydantic_ai_run, claude)
        for run_id, drive in zip(RUNS, drives, strict=True):
            print(f"== {run_id}")
            drive(store)
            for line in path_of(store, run_id):
                print("  " + line)
            record = store.load(run_id)
            statuses[run_id] = record.status
            why = f" ({record.stop_reason}: {record.stop_detail})" if record.stop_reason else ""
            print(f"   ends {record.status}{why}\n")
        if export is not None:
            with export.open("w", encoding="utf-8") as out:
                for run_id in (*RUNS, "sdk-subagent/call_ask"):
                    out.writelines(dump_event(e) + "\n" for e in store.events(run_id))
            print(f"events of {len(RUNS) + 1} SDK runs written to {export}")
    return statuses


def main(argv: list[str] | None = None) -> None:
    """Run the demo (see the module docstring)."""
    demo_main(run_all, __doc__ or "", argv)


if __name__ == "__main__":
    main()
