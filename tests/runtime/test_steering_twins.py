"""Each steering verb and its `a*` twin write the same log and refuse the same way.

One script of verbs (decide two calls, a second decision refused, cancel asked twice, a
pause refused while a driver holds the run) is played through the sync verbs on one store
and through the async twins on another, from the same start; the logs and the refusals must
be the same, event by event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from agentfsm.errors import AgentFSMError
from agentfsm.events import LogBuilder
from agentfsm.runtime import (
    aapprove,
    acancel,
    apause,
    approve,
    areject,
    aresume,
    asubmit,
    cancel,
    pause,
    reject,
    resume,
    submit,
)
from agentfsm.stores import MemoryEventStore, MemoryStorage, ThreadedAsyncEventStore

NOON = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)


def _clock() -> datetime:
    return NOON


def _waiting() -> MemoryEventStore:
    """Run `r1` waits for a decision on calls `t1` and `t2`."""
    calls = [{"action_id": a, "tool": "refund", "arguments": {"order": a}} for a in ("t1", "t2")]
    log = LogBuilder("r1")
    log.add("run.started", objective="refunds")
    log.add("model.started")
    log.add("model.completed", decision="tool_calls", tool_calls=calls)
    for call in calls:
        log.add("approval.requested", **call)
    store = MemoryEventStore(MemoryStorage())
    store.append("r1", log.events, 0)
    return store


def _outcome(step: Callable[[], Any]) -> str:
    try:
        step()
    except AgentFSMError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


async def _aoutcome(step: Callable[[], Any]) -> str:
    try:
        await step()
    except AgentFSMError as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def _dumped(store: MemoryEventStore, run_id: str) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json", exclude={"event_id"}) for e in store.events(run_id)]


def test_the_sync_verbs_and_their_twins_write_the_same_logs() -> None:
    one, other = _waiting(), _waiting()
    sync = [
        _outcome(lambda: approve(one, "r1", "t1", "ann", reason="checked", clock=_clock)),
        _outcome(lambda: approve(one, "r1", "t1", "bob", clock=_clock)),
        _outcome(lambda: reject(one, "r1", "t2", "ann", "too much", clock=_clock)),
        _outcome(lambda: reject(one, "r1", "t2", "bob", "again", clock=_clock)),
        _outcome(lambda: cancel(one, "r1", reason="stop", requested_by="ann", clock=_clock)),
        _outcome(lambda: cancel(one, "r1", reason="twice", clock=_clock)),
        _outcome(lambda: submit(one, "r2", "second", clock=_clock)),
        _outcome(lambda: resume(one, "r2", clock=_clock)),
    ]
    lease = one.hold("r2", holder="w1")
    sync.append(_outcome(lambda: pause(one, "r2", "lunch", clock=_clock)))
    lease.release()
    sync.append(_outcome(lambda: pause(one, "r2", "lunch", clock=_clock)))
    sync.append(_outcome(lambda: resume(one, "r2", clock=_clock)))

    async def twins() -> list[str]:
        async with ThreadedAsyncEventStore(other) as h:
            out = [
                await _aoutcome(lambda: aapprove(h, "r1", "t1", "ann", reason="checked", clock=_clock)),
                await _aoutcome(lambda: aapprove(h, "r1", "t1", "bob", clock=_clock)),
                await _aoutcome(lambda: areject(h, "r1", "t2", "ann", "too much", clock=_clock)),
                await _aoutcome(lambda: areject(h, "r1", "t2", "bob", "again", clock=_clock)),
                await _aoutcome(lambda: acancel(h, "r1", reason="stop", requested_by="ann", clock=_clock)),
                await _aoutcome(lambda: acancel(h, "r1", reason="twice", clock=_clock)),
                await _aoutcome(lambda: asubmit(h, "r2", "second", clock=_clock)),
                await _aoutcome(lambda: aresume(h, "r2", clock=_clock)),
            ]  # fmt: skip
            held = other.hold("r2", holder="w1")
            out.append(await _aoutcome(lambda: apause(h, "r2", "lunch", clock=_clock)))
            held.release()
            out.append(await _aoutcome(lambda: apause(h, "r2", "lunch", clock=_clock)))
            out.append(await _aoutcome(lambda: aresume(h, "r2", clock=_clock)))
        return out

    assert asyncio.run(twins()) == sync
    for run_id in ("r1", "r2"):
        assert _dumped(other, run_id) == _dumped(one, run_id)
    assert [e.type for e in one.events("r1")][5:] == [
        "approval.accepted", "approval.rejected", "run.cancel_requested",
    ]  # fmt: skip
    assert [e.type for e in one.events("r2")] == ["run.started", "run.paused", "run.resumed"]
    assert sync[1].startswith("AlreadyDecidedError: ")
    assert sync[8].startswith("RunHeldError: ")
