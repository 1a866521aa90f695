"""The benchmarks that `make bench` and `make bench-stores` end with, and `make bench-runtime`'s
floor row, still run (tiny sizes).

Nothing here is timed: a figure is only measured by the benchmarks themselves. This keeps
a refactor from breaking them unseen, and checks they print every row they promise.
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from benchmarks import bench_runtime, lease_costs, store_costs


def test_store_costs_prints_every_part_next_to_the_raw_insert(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every row of the breakdown is printed with its ratio to the raw insert."""
    assert store_costs.main(["--calls", "3", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for row in (
        "| ours |",
        "| ours, handed the writer's fold |",
        "| without runs row |",
        "| raw | ",
        "| the fold (reduce) |",
        "| the stored line (dump_event) |",
        "| the hashed canonical JSON (from the line) |",
        "| the chain link (sha256) |",
    ):
        assert row in out, row
    assert "| 1.00x |" in out


def test_lease_costs_prints_a_row_per_store_and_the_check(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The leased and unleased turn of each store, and the append's check, are printed."""
    with capture_logs():
        assert lease_costs.main(["--rounds", "1", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "| memory | " in out
    assert "| SQLite (NORMAL) | " in out
    assert "the writer's check of its lease, per append: " in out


def test_the_runner_on_a_store_that_writes_nothing_completes_its_runs() -> None:
    """`make bench-runtime`'s floor row: the Runner completes its runs on `WritesNothing`
    (handed each batch's fold, it keeps only the run's first event), so the row measures
    whole turns, not a run that stopped early."""
    assert len(bench_runtime.bench_agentfsm(bench_runtime.WritesNothing, 3, 2)) == 2
    store = bench_runtime.WritesNothing()
    record = bench_runtime.Runner(store, _agent()).run("r").record
    assert record.status == "completed"
    assert record.version > 1
    assert [e.type for e in store.events("r")] == ["run.started"]


def _agent() -> bench_runtime.Agent:
    decide = bench_runtime._fake_decisions(2)
    return bench_runtime.Agent(
        "bench",
        lambda ctx: decide(ctx.turn),
        [bench_runtime.Tool("lookup", lambda ctx: "ok", side_effects=False)],
    )
