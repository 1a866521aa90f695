"""The action ledger: a persistent mapping that behaves like the dict it replaces."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm import ledger as ledgers
from agentfsm.ledger import UNSETTLED, Ledger
from agentfsm.names import ActionStatus
from agentfsm.record import Action, RunRecord
from agentfsm.reducers import DEFAULT_REDUCER
from agentfsm.testing import legal_runs

IDS = st.sampled_from([f"a{i}" for i in range(12)])
STATUSES = st.sampled_from(list(ActionStatus))


def _action(aid: str, status: str) -> Action:
    return Action(action_id=aid, tool="t", arguments={}, status=ActionStatus(status))


#: A program of puts: (which earlier ledger to put on, id, status).
PROGRAMS = st.lists(st.tuples(st.integers(0, 40), IDS, STATUSES), max_size=40)


class TestLedger:
    """Every ledger reached by puts reads like a dict built by the same puts."""

    @given(PROGRAMS)
    def test_it_reads_like_the_dict_of_the_same_puts(self, program: list[Any]) -> None:
        """Order, lookups, length, equality and the unsettled actions agree with a dict,
        also for puts on older ledgers (forks), which must not see each other's ids."""
        pairs: list[tuple[Ledger, dict[str, Action]]] = [(Ledger(), {})]
        for which, aid, status in program:
            ledger, model = pairs[which % len(pairs)]
            action = _action(aid, status)
            model = {**model, aid: action}
            pairs.append((ledger.put(action), model))
        for ledger, model in pairs:
            assert list(ledger) == list(model)
            assert list(ledger.items()) == list(model.items())
            assert list(ledger.values()) == list(model.values())
            assert len(ledger) == len(model)
            assert ledger == model
            assert model == ledger
            assert all(ledger[k] is v and ledger.get(k) is v for k, v in model.items())
            assert "nope" not in ledger
            assert ledger.get("nope") is None
            unsettled = [a for a in model.values() if a.status in UNSETTLED]
            assert list(ledger.unsettled()) == unsettled

    def test_a_key_that_is_not_its_actions_id_is_refused(self) -> None:
        """A mapping whose key and action id disagree cannot become a ledger."""
        with pytest.raises(ValueError, match=r"^action keyed 'x' names action_id 'y'$"):
            Ledger.of({"x": _action("y", "started")})

    def test_threads_adding_to_one_ledger_each_get_their_own(self) -> None:
        """Ledgers grown from one ledger by many threads at once each hold their own id."""
        base = Ledger([_action("a0", "succeeded")])
        results: dict[str, Ledger] = {}

        def grow(name: str) -> None:
            for _ in range(200):
                results[name] = base.put(_action(name, "started"))

        threads = [threading.Thread(target=grow, args=(f"t{i}",)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert {name: list(led) for name, led in results.items()} == {
            f"t{i}": ["a0", f"t{i}"] for i in range(8)
        }

    def test_the_reducer_keeps_a_dict_while_small_and_a_ledger_past_it(self) -> None:
        """`put` copies a dict up to `SMALL` actions and moves to a `Ledger` beyond."""
        actions: Any = {}
        for i in range(ledgers.SMALL + 1):
            actions = ledgers.put(actions, _action(f"a{i}", "started"))
            assert type(actions) is (dict if i < ledgers.SMALL else Ledger)
        assert list(actions) == [f"a{i}" for i in range(ledgers.SMALL + 1)]


class TestRecordsWithALedger:
    """The reducer's records are the same whichever form the ledger takes."""

    @settings(max_examples=60)
    @given(legal_runs(min_events=3))
    def test_folding_with_a_ledger_from_the_start_gives_the_same_records(
        self, events: list[Any]
    ) -> None:
        """With `SMALL` at 0 every record holds a `Ledger`; each equals the dict fold's and
        dumps to the same bytes."""
        dicts = _fold(events)
        saved = ledgers.SMALL
        ledgers.SMALL = 0
        try:
            ledgered = _fold(events)
        finally:
            ledgers.SMALL = saved
        for d, led in zip(dicts, ledgered, strict=True):
            assert led == d
            assert led.dumps() == d.dumps()
            assert led.pending_approvals == d.pending_approvals
            assert led.in_flight == d.in_flight
            assert RunRecord.loads(led.dumps()) == d
        assert all(isinstance(r.actions, Ledger) for r in ledgered if r.actions)


def _fold(events: list[Any]) -> list[RunRecord]:
    record = DEFAULT_REDUCER.initial(events[0].run_id)
    out = []
    for event in events:
        record = DEFAULT_REDUCER.reduce(record, event)
        out.append(record)
    return out
