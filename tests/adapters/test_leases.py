"""Every SDK adapter's run holds the run's lease: one driver per run, whoever drives it.

Through each SDK's real runner (`_drivers`), on SQLite: while the adapter's run is inside a
tool, the store names its lease's holder and a Runner elsewhere is refused; a run another
driver holds is refused to the adapter at once, before anything is recorded; afterwards the
lease is free.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentfsm.errors import RunHeldError
from agentfsm.runtime import Agent, Runner, ScriptedModel
from agentfsm.stores import SQLiteEventStore
from tests.adapters._drivers import DRIVERS, Driver, Tool, agent, call, make_driver, say


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest, tmp_path: Path) -> Driver:
    """Each SDK's driver in turn (skipped when its SDK is not installed)."""
    pytest.importorskip(DRIVERS[request.param])
    return make_driver(request.param, tmp_path)


def test_the_adapters_run_holds_the_lease_while_its_tools_run(
    driver: Driver, tmp_path: Path
) -> None:
    """Inside the tool: the holder is the adapter's drive in this process, and a Runner on
    another handle is refused naming it. After the run: nobody holds it."""
    path = tmp_path / "runs.db"
    seen: list[Any] = []

    def peek(q: str) -> str:
        """Look at who drives the run (meanwhile, another driver tries)."""
        with SQLiteEventStore(path) as other:
            holder = other.holder("r1")
            try:
                Runner(other, Agent("intruder", ScriptedModel([]))).drive("r1")
            except RunHeldError as exc:
                seen.append((holder, exc.holder.id))
        return f"looked at {q}"

    spec = agent("a", call("peek", "call_1", q="x"), say("done"), tools=(Tool("peek", peek),))
    with SQLiteEventStore(path) as store:
        done = driver.run(store, "r1", spec, prompt="look")
        assert (done.status, done.record.actions["call_1"].result) == ("completed", "looked at x")
        ((holder, refused_by),) = seen
        assert holder is not None
        assert (holder.pid, refused_by) == (os.getpid(), holder.id)
        assert holder.id.startswith(f"{driver.name}-")
        assert store.holder("r1") is None


def test_a_run_another_driver_holds_is_refused_to_the_adapter(
    driver: Driver, tmp_path: Path
) -> None:
    """A resume of a run a worker holds: `RunHeldError` at once, nothing recorded."""
    with SQLiteEventStore(tmp_path / "runs.db") as store:
        refunding = agent("refunds", call("refund", "call_r1", order_id="O-1"), say("Done."))
        paused = driver.run(store, "r1", refunding, prompt="refund O-1")
        assert paused.status == "waiting_approval"
        version = store.load("r1").version
        lease = store.hold("r1", holder="w1")
        with pytest.raises(RunHeldError) as info:
            driver.drive(store, "r1", agent("refunds", say("Done.")))
        assert info.value.holder.id == "w1"
        assert store.load("r1").version == version
        lease.release()
