"""What guards cost: full `reduce` with every built-in guard vs without guards: `make bench`.

The same seeded corpus as bench_core (benchmarks/corpus.py). Three reducers fold it:

- no guards at all (`Reducer(run_limits=False)`): the floor;
- the plain reducer, which enforces each run's own `run.started.limits` (the corpus runs
  declare `max_turns`);
- every guard: `MaxTurns`, `MaxAttempts`, `Deadline`, `Budget` and `LoopDetector` as Python
  objects, on top of the runs' own limits. Limits are set so that nothing trips: every event
  is checked and accepted, which is the expensive case.

Rounds are interleaved and rotated; the median of the rounds is reported. Times are CPU
time of this process (`time.process_time`), so other work on a shared machine skews the
ratio less than wall time would. The goal: all guards within 2x of no guards.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm import Event
from agentfsm.guards import Budget, Deadline, LoopDetector, MaxAttempts, MaxTurns
from agentfsm.reducers import DEFAULT_REDUCER, Reducer
from benchmarks.bench_core import measure
from benchmarks.corpus import build_corpus

ALL_GUARDS = Reducer(
    guards=[
        MaxTurns(50),
        MaxAttempts(5),
        Deadline(datetime(2026, 9, 2, tzinfo=UTC)),
        Budget(max_tokens=10**9, max_cost=10.0**6),
        LoopDetector(threshold=3, window=10),
    ]
)
NO_GUARDS = Reducer(run_limits=False)


def fold_all(reducer: Reducer, runs: list[list[Event]]) -> int:
    """Fold every run; returns the number of events."""
    reduce = reducer.reduce
    initial = reducer.initial
    n = 0
    for events in runs:
        record = initial(events[0].run_id)
        for event in events:
            record = reduce(record, event)
        n += len(events)
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000, help="corpus size (events)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median)")
    args = parser.parse_args(argv)

    print(f"building a corpus of {args.events:,} events ...", file=sys.stderr)
    runs = build_corpus(args.events)
    fold_all(ALL_GUARDS, runs)  # every run passes every guard: no refusal is measured
    total = sum(len(r) for r in runs)
    cases = {
        "reduce, no guards": lambda: fold_all(NO_GUARDS, runs),
        "reduce, the runs' own limits (plain reducer)": lambda: fold_all(DEFAULT_REDUCER, runs),
        "reduce, all guards": lambda: fold_all(ALL_GUARDS, runs),
    }
    rate = measure(cases, args.rounds)
    base = rate["reduce, no guards"]
    print(f"\ncorpus: {len(runs):,} runs, {total:,} events, median of {args.rounds} rounds\n")
    print("| reducer | events per second | µs each | time vs no guards |")
    print("| --- | ---: | ---: | ---: |")
    for name, value in rate.items():
        print(f"| {name} | {value:,.0f} | {1e6 / value:.2f} | {base / value:.2f}x |")
    ratio = base / rate["reduce, all guards"]
    met = "yes" if ratio <= 2.0 else "NO"
    print(f"\nall guards vs no guards: {ratio:.2f}x the time (goal <= 2x): {met}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
