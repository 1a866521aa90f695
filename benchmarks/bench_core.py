"""Core speed, side by side with peers, in one process: `make bench`.

Every implementation walks the same seeded corpus of legal runs (benchmarks/corpus.py).
Rounds are interleaved (each round runs every implementation once, in a rotated order) and
the median of the rounds is reported, so drift on a busy machine hits everyone alike.
Figures are ratios on this machine in this run; absolute times are printed for context.

Peers:
- `transitions` Machine per run, as users write it (auto_transitions on), and without
  auto transitions; conditions pick between targets of one event just like ours do.
- `python-statemachine` 3 on a subset of the corpus (it is slow).
- a bare dict-lookup `.fire()` method: the floor for any table-driven step.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from statemachine import State as PsmState
from statemachine import StateMachine
from statemachine.exceptions import TransitionNotAllowed
from transitions import Machine, MachineError

from agentfsm import DEFAULT_TABLE, LifecycleError, RunRecord
from agentfsm.events import RunResumed
from agentfsm.reducers import DEFAULT_REDUCER
from benchmarks.corpus import build_corpus

TABLE = DEFAULT_TABLE
Trace = list[tuple[Any, RunRecord, str]]  # (event, record before it, state after it)


# -- peers, compiled from the same table ----------------------------------------------------


def _wants(target: str) -> Callable[..., bool]:
    # The peer is told which target the run really took; evaluating our real conditions
    # would need our record, which a peer does not have. This flatters the peers slightly.
    return lambda want=None, **_: want == target


def transitions_spec() -> dict[str, Any]:
    """States and transitions for `transitions.Machine`, conditions on the guarded pairs."""
    specs = []
    for t in TABLE.transitions:
        spec: dict[str, Any] = {"trigger": t.event, "source": t.source, "dest": t.target}
        if t.condition is not None:
            spec["conditions"] = [_wants(t.target)]
        specs.append(spec)
    return {"states": list(TABLE.state_names), "transitions": specs, "initial": TABLE.initial}


def psm_class() -> type[StateMachine]:
    """The table as a python-statemachine class (event names without dots)."""
    states = {
        s.name: PsmState(initial=s.name == TABLE.initial, final=s.terminal) for s in TABLE.states
    }
    events: dict[str, Any] = {}
    for t in TABLE.transitions:
        name = t.event.replace(".", "_")
        kwargs = {"cond": _wants(t.target)} if t.condition is not None else {}
        edge = states[t.source].to(states[t.target], **kwargs)
        events[name] = edge if name not in events else events[name] | edge
    return type("AgentRun", (StateMachine,), {**states, **events})


class Floor:
    """The floor: one dict lookup per event, the taken target handed in for guarded pairs."""

    __slots__ = ("_moves", "state")

    def __init__(self, moves: dict[str, dict[str, str | None]], initial: str) -> None:
        self._moves = moves
        self.state = initial

    def fire(self, event: str, want: str) -> None:
        target = self._moves[self.state][event]
        self.state = want if target is None else target


def floor_moves() -> dict[str, dict[str, str | None]]:
    moves: dict[str, dict[str, str | None]] = {s: {} for s in TABLE.state_names}
    for t in TABLE.transitions:
        moves[t.source][t.event] = None if t.condition is not None else t.target
    return moves


# -- the measured loops ----------------------------------------------------------------------


def traces(runs: list[list[Any]]) -> list[Trace]:
    out = []
    for events in runs:
        record = DEFAULT_REDUCER.initial(events[0].run_id)
        trace = []
        for ev in events:
            after = DEFAULT_REDUCER.reduce(record, ev)
            trace.append((ev, record, after.status))
            record = after
        out.append(trace)
    return out


def ours_step(data: list[Trace]) -> int:
    step = TABLE.step
    n = 0
    for trace in data:
        state = TABLE.initial
        for ev, rec, _ in trace:
            state = step(state, ev.type, rec, ev)
        n += len(trace)
    return n


def ours_reduce(runs: list[list[Any]]) -> int:
    reduce = DEFAULT_REDUCER.reduce
    initial = DEFAULT_REDUCER.initial
    n = 0
    for events in runs:
        record = initial(events[0].run_id)
        for ev in events:
            record = reduce(record, ev)
        n += len(events)
    return n


def floor_fire(data: list[Trace]) -> int:
    moves = floor_moves()
    n = 0
    for trace in data:
        machine = Floor(moves, "created")
        fire = machine.fire
        for ev, _, want in trace:
            fire(ev.type, want)
        n += len(trace)
    return n


def peer_steps(machines: list[Any], data: list[Trace], reset: Callable[[Any], None]) -> int:
    n = 0
    for machine, trace in zip(machines, data, strict=True):
        reset(machine)
        trigger = machine.trigger
        for ev, _, want in trace:
            trigger(ev.type, want=want)
        n += len(trace)
    return n


def psm_steps(data: list[Trace], cls: type[StateMachine]) -> int:
    n = 0
    for trace in data:
        machine = cls()
        send = machine.send
        for ev, _, want in trace:
            send(ev.type.replace(".", "_"), want=want)
        n += len(trace)
    return n


def illegal_pairs(data: list[Trace]) -> list[tuple[RunRecord, Any]]:
    """Every 10th event of the corpus replaced by `run.resumed`, illegal wherever it lands."""
    pairs = []
    i = 0
    for trace in data:
        for ev, rec, _ in trace:
            i += 1
            if i % 10 == 0 and rec.status != "paused":
                bad = RunResumed.model_construct(
                    run_id=rec.run_id, sequence=rec.version + 1, occurred_at=ev.occurred_at
                )
                pairs.append((rec, bad))
    return pairs


def ours_reject(pairs: list[tuple[RunRecord, Any]]) -> int:
    reduce = DEFAULT_REDUCER.reduce
    for rec, bad in pairs:
        try:
            reduce(rec, bad)
        except LifecycleError:
            pass
        else:
            raise AssertionError("an illegal event was accepted")
    return len(pairs)


def transitions_reject(pairs: list[tuple[RunRecord, Any]], machines: dict[str, Any]) -> int:
    for rec, _ in pairs:
        try:
            machines[rec.status].trigger("run.resumed")
        except MachineError:
            pass
        else:
            raise AssertionError("an illegal event was accepted")
    return len(pairs)


def psm_reject(pairs: list[tuple[RunRecord, Any]], machines: dict[str, Any]) -> int:
    for rec, _ in pairs:
        try:
            machines[rec.status].send("run_resumed")
        except TransitionNotAllowed:
            pass
        else:
            raise AssertionError("an illegal event was accepted")
    return len(pairs)


# -- the harness ----------------------------------------------------------------------------


def measure(cases: dict[str, Callable[[], int]], rounds: int) -> dict[str, float]:
    """Median operations per second of each case over interleaved, rotated rounds."""
    rates: dict[str, list[float]] = {name: [] for name in cases}
    names = list(cases)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            start = time.process_time()  # CPU time: other jobs on a shared machine count less
            ops = cases[name]()
            rates[name].append(ops / (time.process_time() - start))
        print(f"  round {r + 1}/{rounds} done", file=sys.stderr)
    return {name: statistics.median(values) for name, values in rates.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="corpus size (events)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    parser.add_argument("--peer-runs", type=int, default=600, help="runs used for slow peers")
    args = parser.parse_args(argv)

    print(f"building a corpus of {args.events:,} events ...", file=sys.stderr)
    runs = build_corpus(args.events)
    data = traces(runs)
    total = sum(len(r) for r in runs)
    peer_data = data[: args.peer_runs]
    spec = transitions_spec()
    default_machines = [Machine(**spec) for _ in peer_data]
    plain_machines = [Machine(**spec, auto_transitions=False) for _ in peer_data]
    cls = psm_class()
    pairs = illegal_pairs(data)
    peer_pairs = pairs[: len(pairs) // 10]
    t_by_state = {s: Machine(**{**spec, "initial": s}) for s in TABLE.state_names}
    psm_by_state: dict[str, Any] = {}
    for s in TABLE.state_names:
        machine = cls()
        machine.current_state_value = s
        psm_by_state[s] = machine
    run_ids = [r[0].run_id for r in runs]

    def reset(m: Any) -> None:
        m.set_state(TABLE.initial)

    cases: dict[str, Callable[[], int]] = {
        "agentfsm step": lambda: ours_step(data),
        "agentfsm reduce (ledger, usage, batches)": lambda: ours_reduce(runs),
        "bare dict-lookup .fire() (floor)": lambda: floor_fire(data),
        "transitions step (default Machine)": lambda: peer_steps(
            default_machines, peer_data, reset
        ),
        "transitions step (auto_transitions=False)": lambda: peer_steps(
            plain_machines, peer_data, reset
        ),
        "python-statemachine step (incl. instance)": lambda: psm_steps(peer_data[:200], cls),
        "agentfsm reject illegal event": lambda: ours_reject(pairs),
        "transitions reject illegal event": lambda: transitions_reject(peer_pairs, t_by_state),
        "python-statemachine reject illegal event": lambda: psm_reject(peer_pairs, psm_by_state),
        "agentfsm new run state": lambda: sum(1 for rid in run_ids if DEFAULT_REDUCER.initial(rid)),
        "transitions new Machine (default)": lambda: sum(1 for _ in range(200) if Machine(**spec)),
        "transitions new Machine (auto_transitions=False)": lambda: sum(
            1 for _ in range(200) if Machine(**spec, auto_transitions=False)
        ),
        "python-statemachine new instance": lambda: sum(1 for _ in range(200) if cls()),
    }
    print(f"{len(runs):,} runs, {total:,} events; peers on {len(peer_data)} runs", file=sys.stderr)
    rate = measure(cases, args.rounds)

    def row(name: str, base: str) -> str:
        per = 1e6 / rate[name]
        return f"| {name} | {rate[name]:,.0f} | {per:.2f} | {rate[name] / rate[base]:.1f}x |"

    step_base = "transitions step (default Machine)"
    print(f"\ncorpus: {len(runs):,} runs, {total:,} events, median of {args.rounds} rounds\n")
    print("| operation | per second | µs each | vs transitions |")
    print("| --- | ---: | ---: | ---: |")
    for name in list(cases)[:6]:
        print(row(name, step_base))
    for name in list(cases)[6:9]:
        print(row(name, "transitions reject illegal event"))
    for name in list(cases)[9:]:
        print(row(name, "transitions new Machine (default)"))

    def ratio(a: str, b: str) -> float:
        return rate[a] / rate[b]

    checks = [
        ("step vs transitions", ratio("agentfsm step", step_base), ">=", 25.0),
        (
            "floor vs step (how far step is from a bare dict lookup)",
            ratio("bare dict-lookup .fire() (floor)", "agentfsm step"),
            "<=",
            3.0,
        ),
        (
            "illegal-event rejection vs transitions",
            ratio("agentfsm reject illegal event", "transitions reject illegal event"),
            ">=",
            4.0,
        ),
        (
            "new run state vs a new transitions Machine",
            ratio("agentfsm new run state", "transitions new Machine (default)"),
            ">=",
            100.0,
        ),
        (
            "full reduce vs transitions' bare state change",
            ratio("agentfsm reduce (ledger, usage, batches)", step_base),
            ">=",
            5.0,
        ),
    ]
    print("\n| target | measured | goal | met |")
    print("| --- | ---: | ---: | --- |")
    for label, value, op, goal in checks:
        met = value >= goal if op == ">=" else value <= goal
        print(f"| {label} | {value:.1f}x | {op} {goal:g}x | {'yes' if met else 'NO'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
