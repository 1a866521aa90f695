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

On a machine others load, `--instructions` counts instead of timing: each measure runs once
per checkout under valgrind's callgrind (`PYTHONHASHSEED=0`, so dicts and sets are laid out
alike every run), counting only the pass itself, after one warm-up pass; the figure is
instructions an event, the same from run to run whatever the load. It takes about a minute
a measure (`--events 3000` is enough).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
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
# What was built so far (the corpus, its events) is frozen out of the collector's sight: a
# collection during a pass then walks only what the pass makes, so where the thresholds
# happen to fall (a few hundred instructions an event, either way) is not counted as the
# code's; that varied with nothing but the checkout's other objects.
gc.collect()
gc.freeze()

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

# The same work as _MEASURE's, run once to warm up (the interpreter specialises its code),
# then once inside `filter`, whose C iterator (`filter_next`) callgrind counts within.
_COUNT = (
    _MEASURE.split("for name, work in")[0]
    + r"""
work = {"parse": parse, "fold": fold, "parse+fold": parse_fold}[sys.argv[4]]
work()
list(filter(lambda _: work(), [0]))
"""
)

MEASURES = ("parse", "fold", "parse+fold")


def _instructions(valgrind: str, root: str, path: str, measure: str, folder: str) -> int:
    """Instructions the interpreter runs for one pass of `measure` in `root` (callgrind)."""
    out = os.path.join(folder, "callgrind.out")
    subprocess.run(  # noqa: S603 - valgrind on our own interpreter and script
        [
            valgrind, "--tool=callgrind", f"--callgrind-out-file={out}",
            "--collect-atstart=no", "--toggle-collect=filter_next",
            sys.executable, "-c", _COUNT, root, path, "1", measure,
        ],
        capture_output=True, text=True, check=True, cwd="/",
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    with open(out) as handle:
        for line in handle:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    raise RuntimeError(f"callgrind wrote no total to {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkouts", nargs="+", help="repository roots; the first is the base")
    parser.add_argument("--rounds", type=int, default=7, help="alternations")
    parser.add_argument("--events", type=int, default=10_000, help="events in the corpus")
    parser.add_argument("--repeats", type=int, default=3, help="passes per process (best)")
    parser.add_argument(
        "--instructions", action="store_true", help="count instructions (callgrind), not time"
    )
    args = parser.parse_args(argv)
    valgrind = shutil.which("valgrind")
    if args.instructions and valgrind is None:
        parser.error("--instructions counts with valgrind, which is not on PATH")
    roots = [os.path.abspath(root) for root in args.checkouts]
    figures: dict[str, dict[str, list[float]]] = {r: {m: [] for m in MEASURES} for r in roots}
    with tempfile.TemporaryDirectory(prefix="compare-parse-") as folder:
        path = os.path.join(folder, "corpus.jsonl")
        subprocess.run(  # noqa: S603 - our own interpreter and script
            [sys.executable, "-c", _WRITE, roots[0], path, str(args.events)], check=True, cwd="/"
        )
        if valgrind is not None and args.instructions:
            with open(path, "rb") as corpus:
                events = sum(1 for line in corpus if line.strip())
            for root in roots:
                for name in MEASURES:
                    count = _instructions(valgrind, root, path, name, folder)
                    figures[root][name].append(count / events)
            title = f"{events:,} events, instructions an event (callgrind)"
            return _table(roots, figures, title, "{:,.0f}")
        for _ in range(args.rounds):
            for root in roots:
                done = subprocess.run(  # noqa: S603 - our own interpreter and script
                    [sys.executable, "-c", _MEASURE, root, path, str(args.repeats)],
                    capture_output=True, text=True, check=True, cwd="/",
                )  # fmt: skip
                for name, value in re.findall(r"(\S+)=([\d.]+)", done.stdout):
                    figures[root][name].append(float(value))
    title = f"{args.events:,} events, CPU µs an event, median of {args.rounds} alternating rounds"
    return _table(roots, figures, title, "{:.2f}")


def _table(
    roots: list[str], figures: dict[str, dict[str, list[float]]], title: str, cell: str
) -> int:
    base = {m: statistics.median(figures[roots[0]][m]) for m in MEASURES}
    print(title)
    print("| checkout | parse | fold | parse+fold | vs the first (parse / fold / parse+fold) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for root in roots:
        medians = {m: statistics.median(figures[root][m]) for m in MEASURES}
        ratios = " / ".join(f"{medians[m] / base[m]:.2f}x" for m in MEASURES)
        cells = " | ".join(cell.format(medians[m]) for m in MEASURES)
        print(f"| {root} | {cells} | {ratios} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
