"""The main job: replay the bundled runs through the default table, move by move.

Run with `make demo`. Each line is one applied event: sequence, event, from -> to.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentfsm import RunRecord, read_events
from agentfsm.reducers import DEFAULT_REDUCER

HERE = Path(__file__).parent
LOGS = ("order_ticket.jsonl", "cancel_order_approval.jsonl")


def show(path: Path) -> RunRecord:
    """Fold one JSONL log, printing each transition, and return the final record."""
    print(f"== {path.name}")
    record: RunRecord | None = None
    with path.open(encoding="utf-8") as lines:
        for _, event in read_events(lines):
            before = record or DEFAULT_REDUCER.initial(event.run_id)
            record = DEFAULT_REDUCER.reduce(before, event)
            print(f"  {event.sequence:>3}  {event.type:<22} {before.status} -> {record.status}")
    assert record is not None
    return record


def main() -> None:
    for name in LOGS:
        record = show(HERE / name)
        summary = {
            k: record.to_json()[k]
            for k in ("run_id", "status", "version", "turn", "final_output", "usage", "facts")
        }
        summary["actions"] = {a.action_id: a.status for a in record.actions.values()}
        print(json.dumps(summary, indent=2, ensure_ascii=False))


if __name__ == "__main__":
    main()
