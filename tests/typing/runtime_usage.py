"""Typed usage of the runtime API: mypy strict must accept this file as written."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from agentfsm.events import Limits, Refusal, Usage
from agentfsm.guards import LoopDetector, MaxTurns
from agentfsm.reducers import Action, RunRecord
from agentfsm.runtime import (
    ALLOW,
    Agent,
    AsyncRunner,
    Decision,
    Emit,
    ModelContext,
    PolicyDecision,
    ProposedCall,
    Runner,
    RunnerConfig,
    RunResult,
    Tool,
    ToolContext,
    ToolError,
    ToolResult,
    Worker,
    approve,
    cancel,
    needs_approval,
    pause,
    subagent,
)
from agentfsm.stores import MemoryEventStore, ThreadedAsyncEventStore
from agentfsm.stores.leases import MemoryLeases


class OrderArgs(BaseModel):
    order_id: str


def get_order(ctx: ToolContext) -> dict[str, Any]:
    args: OrderArgs = ctx.args
    if not args.order_id:
        raise ToolError("no id", kind="invalid", retryable=False)
    return {"order_id": args.order_id, "key": ctx.idempotency_key, "left": ctx.remaining}


async def refund(ctx: ToolContext) -> ToolResult:
    return ToolResult({"refunded": True}, cost=0.01)


def model(ctx: ModelContext) -> Decision:
    if ctx.turn == 1:
        return Decision.call_tools(
            ProposedCall("get_order", {"order_id": "O-1"}), usage=Usage(input_tokens=10)
        )
    return Decision.answer(ctx.results[0].result if ctx.results else None)


def policy(action: Action, record: RunRecord) -> PolicyDecision:
    if action.tool == "refund":
        return needs_approval("money moves", expires_in=timedelta(hours=1))
    return ALLOW


tools = [Tool("get_order", get_order, args=OrderArgs, side_effects=False), Tool("refund", refund)]
agent = Agent("support", model, tools, policy)
helper = subagent("research", Agent("researcher", model), limits=Limits(max_turns=3))
store = MemoryEventStore()
runner = Runner(
    store,
    [agent, Agent("lead", model, [helper])],
    guards=[MaxTurns(5), LoopDetector()],
    config=RunnerConfig(wrap_up_turn=True, reserve=Usage(input_tokens=100), max_turns=None),
)
result: RunResult = runner.run("r1", "look it up", limits=Limits(max_tokens=10_000))
status: str = result.status
approve(store, "r1", "t1.1", "alice")
cancel(store, "r1", reason="done", requested_by="ops")
again: RunResult = runner.drive("r1", wait=5.0)
held_lease = store.hold("r1")
handed: RunResult = runner.drive("r1", lease=held_lease)
held_lease.release()
pause(store, "r1", "lunch", wait=1.0)
worker = Worker(runner, MemoryLeases(store), worker_id="w1", ttl=10)
drained: list[RunResult] = worker.drain(max_runs=1)


async def main() -> RunResult:
    async_runner = AsyncRunner(ThreadedAsyncEventStore(MemoryEventStore()), agent)
    return await async_runner.run("r2")


later: RunResult = asyncio.run(main())


# The agent acts in the run's own lifecycle: a tool causes an event, a decision proposes one.
def escalate(ctx: ToolContext) -> Emit:
    return Emit("ticket.escalated", escalated_to=ctx.args["team"])


def escalated_with_a_note(ctx: ToolContext) -> ToolResult:
    return ToolResult("noted", emit=Emit("ticket.escalated", escalated_to="tier-2"))


def proposing(ctx: ModelContext) -> Decision:
    refusal: Refusal | None = ctx.refusal
    if refusal is not None and refusal.allowed:
        return Decision.emit(Emit(refusal.allowed[0]), usage={"input_tokens": 3})
    seen: list[Refusal | None] = [a.refusal for a in ctx.results]
    return Decision.answer(f"{len(seen)} results")


escalating = Tool("escalate", escalate, emits=("ticket.escalated",))
proposer = Agent("proposer", proposing, [escalating, Tool("note", escalated_with_a_note)])
