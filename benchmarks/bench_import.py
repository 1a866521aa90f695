"""What `import agentfsm` costs, eager as it was and lazy as it is: `make bench-import`.

Three programs, each timed in a fresh interpreter (the import cache is per process, so a
second import in one process would measure nothing):

- **eager**: importing every module the old `agentfsm/__init__.py` imported eagerly (the
  diagrams, the runtime, the stores with `sqlite3`, the audit, the structlog adapter): what
  `import agentfsm` cost before the top level became lazy;
- **lazy**: `import agentfsm` today;
- **lazy + fold**: `from agentfsm import Event, reduce, replay`, what a program that only
  folds logs pays (the events, the table and the reducer, still no runtime or store).

Each round runs the three once, in a rotated order, so a busy neighbour on a shared machine
skews them alike; the median of the rounds is reported. The time is measured inside the
child around the import statement, so interpreter start-up is not counted. The goal: lazy
at most half of eager.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The modules the eager `agentfsm/__init__.py` imported (before issue 14, item 3).
EAGER_MODULES = [
    "agentfsm.adapters.structlog",
    "agentfsm.diagrams",
    "agentfsm.errors",
    "agentfsm.events",
    "agentfsm.fsm.default",
    "agentfsm.fsm.table",
    "agentfsm.guards",
    "agentfsm.names",
    "agentfsm.reducers",
    "agentfsm.reducers.audit",
    "agentfsm.runtime",
    "agentfsm.stores",
]

PROGRAMS = {
    "eager": "import " + ", ".join(EAGER_MODULES),
    "lazy": "import agentfsm",
    "lazy + fold": "from agentfsm import Event, reduce, replay",
}

_TIMER = "import time\nt = time.perf_counter()\n{stmt}\nprint(time.perf_counter() - t)\n"


def time_import(stmt: str) -> float:
    """Seconds `stmt` takes in a fresh interpreter, measured inside it."""
    out = subprocess.run(  # noqa: S603 - our own interpreter and fixed import statements
        [sys.executable, "-c", _TIMER.format(stmt=stmt)],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    return float(out.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="fresh processes per program")
    args = parser.parse_args(argv)

    names = list(PROGRAMS)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(args.rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            times[name].append(time_import(PROGRAMS[name]))

    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"median of {args.rounds} fresh processes each ({sys.version.split()[0]}):")
    for name in names:
        print(f"  {name:<12} {median[name] * 1000:8.1f} ms   {PROGRAMS[name][:60]}")
    ratio = median["lazy"] / median["eager"]
    print(f"lazy / eager: {ratio:.3f} (goal: at most 0.5)")
    return 0 if ratio <= 0.5 else 1


if __name__ == "__main__":
    sys.exit(main())
