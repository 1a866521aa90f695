"""A seeded corpus of legal agent-run logs for the benchmarks.

Runs of about twenty events, in five shapes drawn at random: tool loops (one to three
calls per batch), approvals (accepted or rejected), retries after a retryable failure,
two-phase cancels with a late result, and guard terminations. Every log is checked by
folding it once, so a benchmark never measures a refusal it did not mean to.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from agentfsm import Event, LogBuilder
from agentfsm.reducers import DEFAULT_REDUCER

__all__ = ["build_corpus"]


def _calls(log: LogBuilder, rng: random.Random, n: int) -> list[dict[str, Any]]:
    # Ids made from the position in the log are unique within the run.
    tools = ("search", "get_order", "create_ticket", "fetch", "lookup")
    return [
        {
            "action_id": f"a{len(log.events)}_{i}",
            "tool": rng.choice(tools),
            "arguments": {"q": f"item-{rng.randrange(1000)}", "page": rng.randrange(5)},
        }
        for i in range(n)
    ]


def _model(log: LogBuilder, rng: random.Random, decision: str, **fields: Any) -> None:
    log.add("model.started", reserved_tokens=800)
    usage = {"input_tokens": rng.randrange(200, 900), "output_tokens": rng.randrange(10, 80)}
    log.add("model.completed", decision=decision, usage={**usage, "cost": 0.001}, **fields)


def _execute(log: LogBuilder, rng: random.Random, calls: list[dict[str, Any]]) -> None:
    for call in calls:
        log.add("tool.requested", **call)
    for call in calls:
        log.add("tool.started", action_id=call["action_id"])
        log.add("tool.completed", action_id=call["action_id"], result={"n": rng.randrange(9)})


def _finish(log: LogBuilder, rng: random.Random) -> None:
    _model(log, rng, "final", output="done")
    log.add("run.completed")


def _tool_loop(log: LogBuilder, rng: random.Random) -> None:
    for _ in range(rng.randrange(2, 4)):
        calls = _calls(log, rng, rng.randrange(1, 4))
        _model(log, rng, "tool_calls", tool_calls=calls)
        _execute(log, rng, calls)
    _finish(log, rng)


def _approval(log: LogBuilder, rng: random.Random) -> None:
    calls = _calls(log, rng, 2)
    _model(log, rng, "tool_calls", tool_calls=calls)
    log.add("approval.requested", **calls[1])
    if rng.random() < 0.7:
        log.add("approval.accepted", action_id=calls[1]["action_id"], approver="ann")
        _execute(log, rng, calls)
    else:
        log.add("approval.rejected", action_id=calls[1]["action_id"], reason="no")
        _execute(log, rng, calls[:1])
    _tool_loop(log, rng)


def _retry(log: LogBuilder, rng: random.Random) -> None:
    calls = _calls(log, rng, 1)
    aid = calls[0]["action_id"]
    _model(log, rng, "tool_calls", tool_calls=calls)
    log.add("tool.requested", **calls[0])
    log.add("tool.started", action_id=aid)
    log.add(
        "tool.failed",
        action_id=aid,
        error={"kind": "timeout", "message": "slow", "retryable": True},
    )
    log.add("tool.started", action_id=aid, attempt=2)
    log.add("tool.completed", action_id=aid, result={"n": 1})
    _tool_loop(log, rng)


def _cancel(log: LogBuilder, rng: random.Random) -> None:
    calls = _calls(log, rng, 2)
    _model(log, rng, "tool_calls", tool_calls=calls)
    _execute(log, rng, calls)
    calls = _calls(log, rng, 2)
    _model(log, rng, "tool_calls", tool_calls=calls)
    for call in calls:
        log.add("tool.requested", **call)
        log.add("tool.started", action_id=call["action_id"])
    log.add("run.cancel_requested", reason="user asked", requested_by="ann")
    log.add("tool.completed", action_id=calls[0]["action_id"], result={"late": True})
    log.add("tool.outcome_unknown", action_id=calls[1]["action_id"], reason="grace period over")
    log.add("run.cancelled")


def _terminated(log: LogBuilder, rng: random.Random) -> None:
    for _ in range(4):
        calls = _calls(log, rng, 1)
        _model(log, rng, "tool_calls", tool_calls=calls)
        _execute(log, rng, calls)
    log.add("run.terminated", stop_reason="max_turns", detail="4 of 4 turns used")


_SHAPES: tuple[Callable[[LogBuilder, random.Random], None], ...] = (
    _tool_loop,
    _approval,
    _retry,
    _cancel,
    _terminated,
)


def build_corpus(events: int = 200_000, seed: int = 20261130) -> list[list[Event]]:
    """Runs totalling at least `events` events, the same for the same seed."""
    rng = random.Random(seed)
    runs: list[list[Event]] = []
    total = 0
    while total < events:
        log = LogBuilder(f"run_{len(runs):06d}")
        log.add("run.started", objective="benchmark", agent="main", limits={"max_turns": 12})
        rng.choice(_SHAPES)(log, rng)
        DEFAULT_REDUCER.replay(log.events)  # a corpus of legal runs only
        runs.append(log.events)
        total += len(log.events)
    return runs
