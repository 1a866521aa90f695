"""The benchmarks that `make bench`, `make bench-stores` and `make bench-cli` end with,
`make bench-runtime`'s floor row, and `make bench-ui`'s batch rows still run (tiny sizes).

Nothing here is timed: a figure is only measured by the benchmarks themselves. This keeps
a refactor from breaking them unseen, and checks they print every row they promise.
"""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from benchmarks import (
    bench_cli,
    bench_parse,
    bench_runtime,
    bench_ui,
    lease_costs,
    store_costs,
    ui_batch,
)


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


def test_bench_parse_prints_the_bounded_reader_next_to_the_path_it_replaced(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Both readers, alone and then parsing, each with its ratio to the unbounded one."""
    assert bench_parse.main(["--events", "50", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    for row in (
        "| file iteration + decode (unbounded, before) | nothing |",
        "| iter_lines (bounded) | nothing |",
        "| file iteration + decode (unbounded, before) | parse_event |",
        "| iter_lines (bounded) | parse_event |",
    ):
        assert row in out, row
    assert out.count("| 1.00x |") >= 3  # validate_json's row and both unbounded ones


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


def test_the_cli_growth_check_times_every_verb_on_both_shapes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`make bench-cli`'s table has a row per verb and input shape (`runs` on many runs
    only), each verb having run to exit 0 on the inputs it built."""
    assert bench_cli.main(["--growth", "--sizes", "8"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = [line for line in out if line.startswith(("| runs", "| events"))]
    verbs = ["validate", "replay", "inspect", "diagram --run", "report", "export"]
    assert [row.split(" | ")[:2] for row in rows] == [
        *(["| runs", verb] for verb in [*verbs, "runs"]),
        *(["| events", verb] for verb in verbs),
    ]


def test_bench_ui_prints_the_inbox_and_run_page_of_a_big_batch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`make bench-ui` ends with the inbox and the run page of a run waiting on a batch, and
    the bytes of each; it measures the list's other orders and a live page's looks."""
    bench_ui.main(["--runs", "3", "--events", "40", "--batch", "60", "--rounds", "1"])
    out = capsys.readouterr().out
    assert "runs list, oldest first (cold)" in out
    assert "live: a 40-event run's page sent 5 new rows" in out
    assert "inbox, a 60-call batch waiting (cold)" in out
    assert "run page, a 60-call batch (cold)" in out
    assert "the inbox with the 60-call batch is " in out


def test_ui_batch_measures_each_page_of_the_attack(capsys: pytest.CaptureFixture[str]) -> None:
    """`benchmarks/ui_batch.py` prints a row for the inbox, the run page and the report."""
    assert ui_batch.main(["--calls", "3", "--timeout", "60"]) == 0
    rows = capsys.readouterr().out.splitlines()[2:]
    assert [r.split(" | ")[:2] for r in rows] == [["| 3", w] for w in ui_batch.WHAT]
