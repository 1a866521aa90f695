"""What a store says of its runs without folding a log: a row of its runs table
(`RunInfo`), a bounded count (`RunCount`) and the orders it lists them in (`RunOrder`).

`EventStore.run_info`, `runs` and `count_runs` hand these out; a backend fills them from
its runs table, which an append keeps beside the log in the same transaction.
"""

from __future__ import annotations

from typing import Literal

import attrs

__all__ = [
    "COUNT_EXACT_UP_TO",
    "RUN_ORDERS",
    "RunCount",
    "RunInfo",
    "RunOrder",
]


@attrs.frozen(slots=True)
class RunInfo:
    """One row of `runs()`: where a run stands, without folding its log.

    Attributes:
        run_id: the run.
        status: its state in the table after the last event.
        version: its last sequence.
        updated_at: `occurred_at` of its last event.
    """

    run_id: str
    status: str
    version: int
    updated_at: str | None


#: How many runs `count_runs` counts one by one before it estimates: on SQLite, counting
#: 100,000 index entries takes ~3 ms, so up to this a count is exact and cheap.
COUNT_EXACT_UP_TO = 100_000

#: The orders `runs()` lists in: by run id; by creation in the store, newest or oldest
#: first; by status (A-Z), then run id.
RunOrder = Literal["run_id", "newest", "oldest", "status"]
#: Every `RunOrder`, the default of `runs()` (run id) first.
RUN_ORDERS: tuple[RunOrder, ...] = ("run_id", "newest", "oldest", "status")


@attrs.frozen(slots=True)
class RunCount:
    """What `count_runs()` found: how many runs are in some statuses, counted or estimated.

    Counting stops at a bound (`exact_up_to`), so a count costs the same on a store of
    millions; past it, the store estimates (PostgreSQL from the planner's statistics, SQLite
    from where the bound fell among the runs by creation), and says so.

    Attributes:
        count: the number of runs: exact when `exact`, else an estimate (never below
            `at_least`).
        exact: whether `count` was counted.
        at_least: how many runs are known to be there (`count` when exact; the bound + 1
            when counting stopped).
    """

    count: int
    exact: bool
    at_least: int

    def __str__(self) -> str:
        """`1,234`, `about 120,000` (two significant figures), or `more than 10,000`."""
        if self.exact:
            return f"{self.count:,}"
        if self.count > self.at_least:
            return f"about {_two_figures(self.count):,}"
        return f"more than {self.at_least - 1:,}"

    @classmethod
    def bounded(cls, counted: int, up_to: int, estimate: int | None = None) -> RunCount:
        """The count of a backend's `_count_runs` that stopped after `up_to` + 1 rows
        (`counted` is then above `up_to`), with its `estimate` for when it stopped (None:
        none)."""
        if counted <= up_to:
            return cls(counted, True, counted)
        return cls(max(estimate or 0, up_to + 1), False, up_to + 1)


def _two_figures(n: int) -> int:
    """`n` rounded to two significant figures (an estimate claims no more)."""
    digits = len(str(n))
    if digits <= 2:
        return n
    scale: int = 10 ** (digits - 2)
    return round(n / scale) * scale
