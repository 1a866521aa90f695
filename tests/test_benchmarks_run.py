"""The benchmarks that `make bench` and `make bench-stores` end with still run (tiny sizes).

Nothing here is timed: a figure is only measured by the benchmarks themselves. This keeps
a refactor from breaking them unseen, and checks they print every row they promise.
"""

from __future__ import annotations

import pytest

from benchmarks import store_costs


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
