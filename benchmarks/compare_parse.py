"""Parsing and folding a log in two (or more) checkouts, measured alternately in one run.

    git worktree add --detach /tmp/base-f218d63 f218d63
    python benchmarks/compare_parse.py /tmp/base-f218d63 .

The same JSON Lines file, written once from the first checkout's seeded corpus
(benchmarks/corpus.py: about twenty events a run, tool loops, approvals, retries, cancels),
is read by every checkout in a fresh process per round, rounds alternating, so a busy machine
slows every checkout alike. Each process reports, in CPU µs an event (best of its repeats):

- parse: `parse_event` on each line (bytes, as a store or a file gives them);
- fold: the default reducer over the parsed events, run by run;
- parse+fold: both, line by line, as `validate` and a store's load do.

The first checkout is the baseline of the ratios. Checkout names as old as f218d63 work.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

_WRITE = r"""
import sys
root, path, events = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, root)
from benchmarks.corpus import build_corpus
from agentfsm.events import dump_event
with open(path, "w") as out:
    for run in build_corpus(events):
        for event in run:
            out.write(dump_event(event) + "\n")
"""

_MEASURE = r"""
import gc, sys, time
root, path, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.path.insert(0, root)
import agentfsm
assert agentfsm.__file__.startswith(root), agentfsm.__file__
from agentfsm.events import parse_event
from agentfsm.reducers import DEFAULT_REDUCER
with open(path, "rb") as handle:
    lines = [line for line in handle.read().split(b"\n") if line]
reduce, initial = DEFAULT_REDUCER.reduce, DEFAULT_REDUCER.initial
events = [parse_event(line) for line in lines]
runs = []
for event in events:
    if not runs or runs[-1][0].run_id != event.run_id:
        runs.append([])
    runs[-1].append(event)

def parse():
    for line in lines:
        parse_event(line)

def fold():
    for run in runs:
        record = initial(run[0].run_id)
        for event in run:
            record = reduce(record, event)

def parse_fold():
    run_id = record = None
    for line in lines:
        event = parse_event(line)
        if event.run_id != run_id:
            run_id, record = event.run_id, initial(event.run_id)
        record = reduce(record, event)

for name, work in (("parse", parse), ("fold", fold), ("parse+fold", parse_fold)):
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    print(f"{name}={best / len(lines) * 1e6:.3f}")
"""

MEASURES = ("parse", "fold", "parse+fold")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkouts", nargs="+", help="repository roots; the first is the base")
    parser.add_argument("--rounds", type=int, default=7, help="alternations")
    parser.add_argument("--events", type=int, default=10_000, help="events in the corpus")
    parser.add_argument("--repeats", type=int, default=3, help="passes per process (best)")
    args = parser.parse_args(argv)
    roots = [os.path.abspath(root) for root in args.checkouts]
    figures: dict[str, dict[str, list[float]]] = {r: {m: [] for m in MEASURES} for r in roots}
    with tempfile.TemporaryDirectory(prefix="compare-parse-") as folder:
        path = os.path.join(folder, "corpus.jsonl")
        subprocess.run(  # noqa: S603 - our own interpreter and script
            [sys.executable, "-c", _WRITE, roots[0], path, str(args.events)], check=True, cwd="/"
        )
        for _ in range(args.rounds):
            for root in roots:
                done = subprocess.run(  # noqa: S603 - our own interpreter and script
                    [sys.executable, "-c", _MEASURE, root, path, str(args.repeats)],
                    capture_output=True, text=True, check=True, cwd="/",
                )  # fmt: skip
                for name, value in re.findall(r"(\S+)=([\d.]+)", done.stdout):
                    figures[root][name].append(float(value))
    base = {m: statistics.median(figures[roots[0]][m]) for m in MEASURES}
    print(f"{args.events:,} events, CPU µs an event, median of {args.rounds} alternating rounds")
    print("| checkout | parse | fold | parse+fold | vs the first (parse / fold / parse+fold) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for root in roots:
        medians = {m: statistics.median(figures[root][m]) for m in MEASURES}
        ratios = " / ".join(f"{medians[m] / base[m]:.2f}x" for m in MEASURES)
        cells = " | ".join(f"{medians[m]:.2f}" for m in MEASURES)
        print(f"| {root} | {cells} | {ratios} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
