"""Every place that asks "has it ended well / is it settling a cancel / is it going already"
reads the state's kind (or what the table says of the state), never a default table's name:
a lifecycle of your own ends, waits and cancels like the built-in one.
"""

from __future__ import annotations

import structlog

from agentfsm.reducers import Reducer
from agentfsm.runtime import Runner, cancel, resume
from agentfsm.stores import MemoryEventStore, StoreOptions
from tests.fixtures.loan import LOAN_TABLE, loan_runs, review_agent


def _loan_store() -> MemoryEventStore:
    store = MemoryEventStore(options=StoreOptions(reducer=Reducer(LOAN_TABLE)))
    with structlog.testing.capture_logs():
        loan_runs(store)
    return store


def test_a_run_ended_in_a_custom_end_state_has_no_partial_output() -> None:
    """A loan approved by its underwriter ended where its table ends it: its answer is the
    run's output, not the partial output of a run stopped before completing."""
    store = _loan_store()
    result = Runner(store, review_agent()).drive("loan-ok")
    assert (result.status, result.partial_output) == ("approved", None)
    assert result.final_output == "documents complete: recommend approval"


def test_a_stopped_run_keeps_its_partial_output() -> None:
    """A run cancelled before it ended keeps what the model last said as partial output."""
    store = _loan_store()
    cancel(store, "loan-uw", reason="the applicant withdrew")
    result = Runner(store, review_agent()).drive("loan-uw")
    assert result.status == "cancelled"
    assert result.partial_output == "documents complete: recommend approval"


def test_asking_twice_to_cancel_is_one_request_in_any_state_that_settles_a_cancel() -> None:
    """The second cancel is a no-op wherever the table settles a cancel: the first reason
    stands."""
    store = _loan_store()
    first = cancel(store, "loan-docs", reason="withdrawn")
    again = cancel(store, "loan-docs", reason="asked again")
    assert (again.version, again.cancel_reason) == (first.version, "withdrawn")


def test_resuming_a_run_that_is_going_is_a_no_op() -> None:
    """`resume` of a run already going (active or with calls in flight) appends nothing."""
    store = _loan_store()
    before = store.load("loan-review")
    resumed = resume(store, "loan-review")
    assert resumed.version == before.version + 1
    assert resume(store, "loan-review").version == resumed.version


def test_resuming_a_run_with_calls_in_flight_is_a_no_op() -> None:
    """A run waiting on its own calls (`in_flight`) is going: `resume` leaves it be instead
    of appending a `run.resumed` the table refuses there."""
    from agentfsm import LogBuilder

    log = LogBuilder("busy")
    log.add("run.started")
    log.add("model.started")
    log.add("model.completed", decision="tool_calls",
            tool_calls=[{"action_id": "a1", "tool": "lookup", "arguments": {}}])  # fmt: skip
    log.add("tool.requested", action_id="a1", tool="lookup", arguments={})
    store = MemoryEventStore()
    store.append("busy", log.events, 0)
    assert resume(store, "busy").version == 4
