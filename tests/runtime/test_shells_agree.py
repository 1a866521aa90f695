"""The sync and async shells around the one drive core write the same log for the same run.

Drawn models, tools, policies and people's verdicts; every tool shares one concurrency key,
so the `AsyncRunner` runs a batch's calls in batch order as the `Runner` does, and each call's
outcome depends on the call alone (not on the order calls happen to run in). The one
difference the shells keep on purpose: the async one runs a batch's other calls while a
subagent's run waits for a person, the sync one returns at once; no drawn child waits.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

import attrs
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm.events import Limits, Usage, step_clock
from agentfsm.guards import LoopDetector
from agentfsm.runtime import (
    Agent,
    AsyncRunner,
    OutcomeUnknownError,
    Runner,
    RunnerConfig,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolError,
    approve,
    reject,
    subagent,
)
from agentfsm.stores import MemoryEventStore, MemoryStorage, ThreadedAsyncEventStore

from .helpers import Sleeps
from .test_runner_properties import TOOLS, _policy, batches, decisions, policies

OUTCOMES = ("ok", "retryable", "fatal", "unknown", "raise")
ENDED = ("completed", "failed", "cancelled", "terminated", "paused")


def _tools(outcomes: list[str]) -> list[Tool]:
    def make(name: str) -> Tool:
        def fn(ctx: ToolContext) -> Any:
            key = f"{name}|{ctx.run_id}|{ctx.action_id}|{ctx.attempt}".encode()
            outcome = outcomes[zlib.crc32(key) % len(outcomes)]
            if outcome == "retryable":
                raise ToolError("busy", kind="busy", retryable=True)
            if outcome == "fatal":
                raise ToolError("no", kind="refused")
            if outcome == "unknown":
                raise OutcomeUnknownError("timed out after sending")
            if outcome == "raise":
                raise RuntimeError("bug")
            return {"n": ctx.args.get("n", 0), "attempt": ctx.attempt}

        flags: dict[str, Any] = {
            "lookup": {"side_effects": False, "max_attempts": 3},
            "charge": {},
            "idem": {"idempotent": True, "max_attempts": 2},
            "stop": {"side_effects": False},
        }[name]
        return Tool(name, fn, concurrency_key="serial", **flags)

    return [make(t) for t in TOOLS]


def _agents(script: list[Any], outcomes: list[str], rules: dict[str, str]) -> list[Agent]:
    policy = _policy(rules)
    # A child that waits for a person ends a sync batch at once, while the async one runs
    # the batch's other calls first (by design): so the clerk never asks.
    never_asks = {t: "allow" if r == "approve" else r for t, r in rules.items()}
    clerk = Agent(
        "clerk",
        ScriptedModel(list(reversed(script)), repeat_last=True, by_turn=True),
        _tools(outcomes),
        _policy(never_asks),
    )
    delegate = subagent("delegate", clerk, limits=Limits(max_turns=3))
    tools = [*_tools(outcomes), attrs.evolve(delegate, concurrency_key="serial")]
    return [
        Agent("a", ScriptedModel(script, repeat_last=True, by_turn=True), tools, policy),
        Agent("b", ScriptedModel(list(reversed(script)), repeat_last=True, by_turn=True), tools),
    ]


def _decide(store: MemoryEventStore, step: int, verdicts: list[bool]) -> None:
    waiting = [(i.run_id, a) for i in store.runs() for a in store.load(i.run_id).pending_approvals]
    for i, (run_id, action_id) in enumerate(waiting):
        if verdicts[(step + i) % len(verdicts)]:
            approve(store, run_id, action_id, "alice", clock=step_clock())
        else:
            reject(store, run_id, action_id, "bob", "no", clock=step_clock())


def _logs(store: MemoryEventStore) -> dict[str, list[Any]]:
    return {i.run_id: [e.model_dump() for e in store.events(i.run_id)] for i in store.runs()}


async def _no_sleep(seconds: float) -> None:
    return None


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.builds(lambda first, rest: [first, *rest], batches, st.lists(decisions, max_size=6)),
    outcomes=st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=5),
    rules=policies,
    verdicts=st.lists(st.booleans(), min_size=1, max_size=4),
    max_turns=st.integers(2, 6),
    max_tokens=st.none() | st.integers(200, 2000),
    loops=st.booleans(),
)
def test_sync_and_async_shells_write_the_same_log(
    script: list[Any],
    outcomes: list[str],
    rules: dict[str, str],
    verdicts: list[bool],
    max_turns: int,
    max_tokens: int | None,
    loops: bool,
) -> None:
    """Same agents, tools, limits and verdicts: event for event, the same logs."""
    limits = Limits(max_turns=max_turns, max_tokens=max_tokens)
    config = RunnerConfig(reserve=Usage(input_tokens=100))

    def guards() -> list[Any]:
        return [LoopDetector(threshold=3)] if loops else []

    sync_store = MemoryEventStore(MemoryStorage())
    runner = Runner(
        sync_store,
        _agents(script, outcomes, rules),
        guards=guards(),
        clock=step_clock(),
        sleep=Sleeps(),
        config=config,
    )
    runner.run("r1", "do things", limits=limits)
    for step in range(20):
        if sync_store.load("r1").status in ENDED:
            break
        _decide(sync_store, step, verdicts)
        runner.drive("r1")

    async_store = MemoryEventStore(MemoryStorage())

    async def drive() -> None:
        arunner = AsyncRunner(
            ThreadedAsyncEventStore(async_store),
            _agents(script, outcomes, rules),
            guards=guards(),
            clock=step_clock(),
            sleep=_no_sleep,
            config=config,
        )
        await arunner.run("r1", "do things", limits=limits)
        for step in range(20):
            if async_store.load("r1").status in ENDED:
                break
            _decide(async_store, step, verdicts)
            await arunner.drive("r1")

    asyncio.run(drive())
    assert _logs(async_store) == _logs(sync_store)
