"""The memory store's optional cap (issue 32): at it a new run is refused, clearly, and the
runs already kept go on."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import pytest

from agentfsm.errors import RunNotFoundError, StoreFullError
from agentfsm.stores import MemoryEventStore
from agentfsm.stores.memory import MemoryStorage
from agentfsm.testing import scripted_run


class TestMaxRuns:
    """`MemoryStorage(max_runs=n)` keeps at most n runs."""

    def test_the_run_past_the_cap_is_refused_and_nothing_is_written(self) -> None:
        """With two runs kept, a third is refused with what, which cap and what to do."""
        store = MemoryEventStore(MemoryStorage(max_runs=2))
        for run_id in ("r1", "r2"):
            store.append(run_id, scripted_run(run_id, 0), 0)
        with pytest.raises(StoreFullError) as info:
            store.append("r3", scripted_run("r3", 0), 0)
        assert (info.value.run_id, info.value.cap, info.value.limit) == ("r3", "max_runs", 2)
        assert str(info.value) == (
            "run 'r3' refused: the memory store holds its cap of 2 runs (max_runs); it keeps "
            "everything in this process, for tests and single-process use: use a SQLite or "
            "PostgreSQL store for more"
        )
        with pytest.raises(RunNotFoundError):
            store.run_info("r3")
        assert "r3" not in store.storage.events

    def test_a_kept_run_goes_on_at_the_cap(self) -> None:
        """A run kept before the cap was reached may still be appended to."""
        events = scripted_run("r1", 2)
        store = MemoryEventStore(MemoryStorage(max_runs=1))
        store.append("r1", events[:3], 0)
        store.append("r1", events[3:], 3)
        assert store.run_info("r1").version == len(events)

    def test_the_error_pickles(self) -> None:
        """Raised in a worker process, it reaches the parent whole."""
        error = pickle.loads(pickle.dumps(StoreFullError("r", "max_events", 10)))
        assert (error.run_id, error.cap, error.limit) == ("r", "max_events", 10)


class TestMaxEvents:
    """`MemoryStorage(max_events=n)`: no new run once n events are kept in all."""

    def test_new_runs_are_refused_once_the_events_reach_the_cap(self) -> None:
        """Under the cap a run starts (and may take the count past it); then none does."""
        store = MemoryEventStore(MemoryStorage(max_events=10))
        first, second = scripted_run("r1", 0), scripted_run("r2", 2)
        store.append("r1", first, 0)
        store.append("r2", second, 0)  # past the cap: a run under it when it started
        assert store.storage.event_count == len(first) + len(second) > 10
        with pytest.raises(StoreFullError) as info:
            store.append("r3", scripted_run("r3", 0), 0)
        assert (info.value.cap, info.value.limit) == ("max_events", 10)
        assert "holds its cap of 10 events (max_events)" in str(info.value)

    @pytest.mark.parametrize("cap", ["max_runs", "max_events"])
    def test_a_cap_must_be_at_least_one(self, cap: str) -> None:
        """A cap of 0 would refuse every run: refused when the storage is made."""
        with pytest.raises(ValueError, match=rf"^{cap} must be at least 1 or None, got 0$"):
            MemoryStorage(**{cap: 0})  # type: ignore[arg-type]


def test_the_docs_example_runs_and_prints_what_it_shows(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/stores.md's example of the cap prints the output the page shows under it."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "stores.md").read_text("utf-8")
    blocks = re.findall(r"```python\n(.*?)```\n\n```text\n(.*?)```", page, re.S)
    code, shown = next((c, t) for c, t in blocks if "MemoryStorage(max_runs=1)" in c)
    exec(compile(code, "stores.md", "exec"), {})
    assert capsys.readouterr().out == shown
