"""The loan lifecycle, driven by its own agent on SQLite: the embedded Worker drives the runs,
people answer from the command line, and an offer times out with nobody steering.

`make demo` runs it in steps, the applicant's move made with `agentfsm` between them:

    python examples/demo_loan.py start --db .demo/loans.db    # the agent checks the credit
        # and asks for documents with a tool: the run waits in `documents_requested`
    agentfsm append L-1 loan.documents_received 'document_ids:=["payslip-1","id-1"]' ...
    python examples/demo_loan.py work --db .demo/loans.db --until-settled --export loans.jsonl
        # a Worker claims the run: the agent makes an offer (its decision), and the run
        # waits in `offer_made` (open 1 s here); nobody signs: its timer falls due, the
        # Worker appends `loan.offer_expired`, and the run ends `declined`

Signed instead (`agentfsm append L-1 loan.offer_accepted ...` while the offer is open), the
run ends `approved`.

Nobody steers the runs into the lifecycle's states: the agent's tool causes
`loan.documents_requested` and its decision `loan.offer_made`; the table decides. The store
keeps the runs' timers on the Worker's lease rows (`install_timers`), set in the append that
entered `offer_made`, so the expiry fires whichever worker comes once it is due.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentfsm import Runner, SQLiteEventStore, StoreOptions
from agentfsm.events import dump_event
from agentfsm.reducers import Reducer
from agentfsm.runtime import RunResult, Worker
from agentfsm.runtime.timers import install_timers
from agentfsm.stores.leases import SQLiteLeases
from examples.lifecycles.loan import DEMO_LOAN_TABLE, loan_agent

RUN = "L-1"
#: How long `--until-settled` waits for the runs' timers at most (the offer is open 1 s).
PATIENCE = 10.0
ENDS = DEMO_LOAN_TABLE.terminal_states


def _show(result: RunResult) -> None:
    kind = DEMO_LOAN_TABLE.kind(result.status).value
    print(f"run {result.run_id}: {result.status} ({kind}) {dict(result.record.custom)}")


def start(store: SQLiteEventStore) -> None:
    """Start the application; it waits for its documents, by the agent's own tool."""
    _show(Runner(store, loan_agent()).run(RUN, "decide on the loan application of A-7"))


def work(store: SQLiteEventStore, leases: SQLiteLeases, *, until_settled: bool) -> None:
    """Drain what a Worker can claim; with `until_settled`, keep at it until every run has
    ended (its timers falling due meanwhile), `PATIENCE` seconds at most.

    Raises:
        SystemExit: the runs did not end in time.
    """
    worker = Worker(Runner(store, loan_agent()), leases, worker_id="demo-worker", ttl=30.0)
    give_up = time.monotonic() + PATIENCE
    while True:
        for result in worker.drain():
            _show(result)
        if not until_settled or all(info.status in ENDS for info in store.runs()):
            return
        if time.monotonic() > give_up:
            raise SystemExit(f"the runs did not settle within {PATIENCE} s")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    """`start` the loan runs, or let a Worker `work` on them after a person's move."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("step", choices=("start", "work"))
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--until-settled", action="store_true")
    parser.add_argument("--export", type=Path, help="then write the run's events (JSON Lines)")
    args = parser.parse_args(argv)
    options = StoreOptions(reducer=Reducer(DEMO_LOAN_TABLE))
    leases = SQLiteLeases(args.db)
    try:
        with install_timers(SQLiteEventStore(args.db, options=options), leases) as store:
            if args.step == "start":
                start(store)
            else:
                work(store, leases, until_settled=args.until_settled)
            if args.export is not None:
                lines = [dump_event(event) + "\n" for event in store.events(RUN)]
                args.export.write_text("".join(lines), encoding="utf-8")
    finally:
        leases.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
