"""The Runner's demo: every runtime scenario on one SQLite store, each run's path printed.

    python examples/demo_runtime.py [--dir DIR] [--export runs.jsonl]

Scenarios (each also runs alone from examples/runtime/): the order/ticket run, cancelling an
order with an approval given from another process, a runaway loop stopped by
`loop_detected`, a budget stop, a parallel batch, a worker killed twice then resumed, and a
refund left waiting for its approver (so the web UI's inbox is not empty on first open).
`--export` writes every run's events as JSON Lines, for `agentfsm validate` / `replay` /
`diagram --run`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "runtime"))

import budget_stop  # noqa: E402  (the scenarios live beside this script)
import cancel_order_approval  # noqa: E402
import crash_resume  # noqa: E402
import order_ticket  # noqa: E402
import parallel_batch  # noqa: E402
import refund_awaiting_approval  # noqa: E402
import runaway_loop  # noqa: E402
from kit import demo_main, open_store  # noqa: E402

from agentfsm.events import dump_event  # noqa: E402
from agentfsm.runtime import RunResult  # noqa: E402

SCENARIOS: list[Callable[[Path], RunResult]] = [
    order_ticket.main,
    cancel_order_approval.main,
    runaway_loop.main,
    budget_stop.main,
    parallel_batch.main,
    crash_resume.main,
    refund_awaiting_approval.main,
]


def run_all(workdir: Path, export: Path | None = None) -> list[RunResult]:
    """Run every scenario on `workdir/runs.db`; optionally export all events as JSONL."""
    results = []
    for scenario in SCENARIOS:
        results.append(scenario(workdir))
        print()
    if export is not None:
        with open_store(workdir / "runs.db") as store, export.open("w", encoding="utf-8") as out:
            for info in store.runs():
                for event in store.events(info.run_id):
                    out.write(dump_event(event) + "\n")
        print(f"events of {len(results)} runs written to {export}")
    print("runs: " + ", ".join(f"{r.run_id}={r.status}" for r in results))
    return results


def main(argv: list[str] | None = None) -> None:
    """Run the demo (see the module docstring)."""
    demo_main(run_all, __doc__ or "", argv)


if __name__ == "__main__":
    main()
