"""The Runner's cost per turn in two (or more) checkouts, measured alternately in one run.

    python benchmarks/compare_runner.py /path/to/old-checkout /path/to/this-checkout

What `make bench-runtime` measures for agentfsm alone (one model call asking for one tool
call, and that call, on the memory store, logging off; `--store sqlite` for SQLite in a
temporary file with `synchronous="NORMAL"`), in a fresh process per checkout
and round, rounds alternating, so a busy machine slows every checkout alike. For "before and
after" figures of a change: `git worktree add /tmp/before <commit>` makes the old checkout.
It reads each checkout's own `agentfsm` (the first on `sys.path` of its process) and works
with older checkouts whose names differ (stores under `adapters.stores`, `Decision.calls`).
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys

_CHILD = r"""
import logging, statistics, sys, time
root = sys.argv[1]
sys.path.insert(0, root)
import structlog
structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
import agentfsm
assert agentfsm.__file__.startswith(root), agentfsm.__file__
from agentfsm.runtime import Agent, Decision, ProposedCall, Runner, Tool
try:
    from agentfsm import stores
except ImportError:  # before the stores had a package of their own
    from agentfsm.adapters import stores
turns = 20
ask = getattr(Decision, "call_tools", None) or Decision.calls
answer = getattr(Decision, "answer", None) or Decision.final
calls = [ask(ProposedCall("lookup", {"n": i})) for i in range(turns)]
final = answer("done")
agent = Agent(
    "bench",
    lambda ctx: final if ctx.turn > turns - 1 else calls[ctx.turn - 1],
    [Tool("lookup", lambda ctx: "ok", side_effects=False)],
)
if sys.argv[3] == "sqlite":
    import os, tempfile
    folder = tempfile.mkdtemp(prefix="compare-runner-")
    store = stores.SQLiteEventStore(os.path.join(folder, "runs.db"), synchronous="NORMAL")
else:
    store = stores.MemoryEventStore()
runner = Runner(store, agent)
times = []
for i in range(int(sys.argv[2])):
    start = time.process_time()
    runner.run(f"run-{i}")
    times.append((time.process_time() - start) / turns)
print(f"{statistics.median(times) * 1e6:.1f}")
if sys.argv[3] == "sqlite":
    import shutil
    store.close()
    shutil.rmtree(folder)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("checkouts", nargs="+", help="repository roots to compare")
    parser.add_argument("--rounds", type=int, default=9, help="alternations")
    parser.add_argument("--runs", type=int, default=60, help="runs of 20 turns per process")
    parser.add_argument(
        "--store",
        choices=("memory", "sqlite"),
        default="memory",
        help='the event store: in memory, or SQLite in a temporary file (synchronous="NORMAL")',
    )
    args = parser.parse_args(argv)
    figures: dict[str, list[float]] = {root: [] for root in args.checkouts}
    for _ in range(args.rounds):
        for root in args.checkouts:
            done = subprocess.run(  # noqa: S603 - our own interpreter and script
                [sys.executable, "-c", _CHILD, root, str(args.runs), args.store],
                capture_output=True, text=True, check=True, cwd="/",
            )  # fmt: skip
            figures[root].append(float(re.findall(r"[\d.]+", done.stdout)[-1]))
    first = statistics.median(figures[args.checkouts[0]])
    print(f"store: {args.store}")
    print("| checkout | µs per turn (CPU, median of rounds) | min | vs the first |")
    print("| --- | ---: | ---: | ---: |")
    for root, values in figures.items():
        median = statistics.median(values)
        print(f"| {root} | {median:.1f} | {min(values):.1f} | {median / first:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
