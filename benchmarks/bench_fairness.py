"""Fairness on the Procrastinate engine: short runs queued behind one long run.

    .venv/bin/python benchmarks/bench_fairness.py [--short 200] [--long-turns 1000]

One long run (`--long-turns` model turns, a tool call each) is submitted, then `--short`
runs of three turns, all at once, and two worker processes drain them (a throwaway
PostgreSQL server, fsync off). A short run's completion time is from the submissions to
its `run.completed` event. Three cases, each on a fresh database, side by side in one run:

- no long run (the reference);
- the long run, jobs without a time slice (`slice_turns=None`, `slice_seconds=None`):
  it holds one of the two workers for its life;
- the long run, the default time slice (`EngineSettings.slice_turns`, `slice_seconds`).

Printed: the short runs' p50 and p95 completion times, and each p95 as a ratio of the
reference's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm.events.models import parse_timestamp
from agentfsm.runtime import (
    Agent,
    Decision,
    ProposedCall,
    Runner,
    RunnerConfig,
    Tool,
    ToolContext,
    submit,
)
from agentfsm.runtime.procrastinate import EngineSettings, ProcrastinateEngine
from agentfsm.stores.base import EventStore
from agentfsm.testing.fixtures.postgres_server import postgres_server
from benchmarks.bench_engine import SETTINGS, _database, _procs, _quiet, _stop


def _model(ctx: Any) -> Decision:
    objective = ctx.objective or "go"
    turns = int(objective.split()[1]) if objective.startswith("long") else 3
    if ctx.turn < turns:
        return Decision.call_tools(ProposedCall("lookup", {"key": f"{ctx.run_id}-{ctx.turn}"}))
    return Decision.answer("done")


def _runner(store: EventStore) -> Runner:
    def lookup(ctx: ToolContext) -> Any:
        return {"ok": True}

    agent = Agent("bench", _model, [Tool("lookup", lookup, side_effects=False)])
    return Runner(store, agent, config=RunnerConfig(max_turns=None))


def _worker(dsn: str, settings: EngineSettings) -> None:
    _quiet()
    asyncio.run(ProcrastinateEngine(dsn, _runner, settings=settings).aserve(wait=True))


def case(
    admin: str, name: str, settings: EngineSettings, short: int, long_turns: int
) -> list[float]:
    """The short runs' completion times in seconds, from the submissions."""
    with _database(admin, f"fair_{name}") as dsn:
        engine = ProcrastinateEngine(dsn, _runner, settings=settings)
        engine.migrate()
        store = engine.store()
        start = time.time()
        if long_turns:
            submit(store, "long", f"long {long_turns}")
        for i in range(short):
            submit(store, f"s{i:04d}", "go")
        procs = _procs(_worker, [(dsn, settings)] * 2)
        try:
            while len([r for r in store.runs("completed") if r.run_id != "long"]) < short:
                time.sleep(0.2)
        finally:
            _stop(procs)
        times = []
        for i in range(short):
            last = list(store.events(f"s{i:04d}"))[-1]
            assert last.type == "run.completed", last
            times.append(parse_timestamp(last.occurred_at).timestamp() - start)
        store.close()
        return times


def _p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20)[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=200)
    parser.add_argument("--long-turns", type=int, default=1000)
    args = parser.parse_args()
    _quiet()
    base = attrs.evolve(SETTINGS, concurrency=1)
    cases = {
        "no long run": (base, 0),
        "long run, no slice": (attrs.evolve(base, slice_turns=None, slice_seconds=None), 1),
        "long run, default slice": (base, 1),
    }
    print(
        f"{args.short} short runs (3 turns) + one run of {args.long_turns} turns, 2 worker "
        f"processes; default slice {base.slice_turns} turns / {base.slice_seconds} s; "
        f"{os.cpu_count()} cores"
    )
    print("| case | p50 s | p95 s | p95 vs no long run |")
    print("| --- | ---: | ---: | ---: |")
    reference = None
    with postgres_server() as server:
        for i, (label, (settings, has_long)) in enumerate(cases.items()):
            times = case(server.dsn, str(i), settings, args.short, args.long_turns * has_long)
            p95 = _p95(times)
            reference = reference or p95
            print(
                f"| {label} | {statistics.median(times):.2f} | {p95:.2f} | {p95 / reference:.2f}x |"
            )


if __name__ == "__main__":
    main()
