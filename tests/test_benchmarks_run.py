"""The benchmarks that `make bench`, `make bench-stores` and `make bench-cli` end with, and
`make bench-runtime`'s floor row, still run (tiny sizes).

Nothing here is timed: a figure is only measured by the benchmarks themselves. This keeps
a refactor from breaking them unseen, and checks they print every row they promise.
"""

from __future__ import annotations

import pytest

from benchmarks import bench_cli, bench_parse, bench_runtime, store_costs


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
