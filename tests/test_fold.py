"""The one streaming fold `validate` and `audit` share keeps per-run state for live runs only."""

from __future__ import annotations

from agentfsm import LogBuilder
from agentfsm.errors import IllegalTransitionError
from agentfsm.events import Event
from agentfsm.reducers._fold import InterleavedFold
from agentfsm.reducers.reduce import DEFAULT_REDUCER


def _ended(run_id: str) -> list[Event]:
    log = LogBuilder(run_id)
    log.add("run.started", objective="x")
    log.add("model.started")
    log.add("model.completed", decision="final", output="done")
    log.add("run.completed")
    return list(log.events)


class TestInterleavedFold:
    """Runs interleaved line by line fold as if each were alone."""

    def test_an_ended_run_keeps_only_a_stub(self) -> None:
        """After its terminal event a run keeps status, version and stop reason, no ledger."""
        fold = InterleavedFold(DEFAULT_REDUCER)
        for a, b in zip(_ended("a"), _ended("b"), strict=True):
            fold.feed(a)
            fold.feed(b)
        stub = fold.records["a"]
        assert (list(fold.records), stub.status, stub.version) == (["a", "b"], "completed", 4)
        assert (stub.final_output, stub.objective, stub.turn) == (None, None, 0)

    def test_keep_records_keeps_the_whole_record(self) -> None:
        """For a replay of every run, the ended run keeps what its events added up to."""
        fold = InterleavedFold(DEFAULT_REDUCER, keep_records=True)
        for event in _ended("a"):
            fold.feed(event)
        assert (fold.records["a"].final_output, fold.records["a"].turn) == ("done", 1)

    def test_a_run_stops_at_its_first_problem(self) -> None:
        """An event after the end is refused once; the run's later events are skipped."""
        fold = InterleavedFold(DEFAULT_REDUCER)
        events = _ended("a")
        for event in events:
            fold.feed(event)
        late = LogBuilder("a", start=5)
        late.add("model.started")
        late.add("model.completed", decision="final", output="again")
        step = fold.feed(late.events[0])
        assert step is not None
        assert step.after is None
        assert isinstance(step.problem, IllegalTransitionError)
        assert str(step.problem) == (
            "run 'a' is 'completed' (terminal): event 'model.started' (sequence 5) is not allowed; "
            "allowed: none"
        )
        assert fold.feed(late.events[1]) is None
