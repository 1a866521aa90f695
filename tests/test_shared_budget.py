"""A root run's budget shared with the child runs it spawns."""

from __future__ import annotations

import pytest

from agentfsm import Event, GuardRejectedError, RunRecord
from agentfsm.guards import Charge, GuardContext, SharedBudget, Verdict
from agentfsm.reducers import DEFAULT_REDUCER, audit
from tests.guardlogs import model_call, new_run, value_error


class Tree:
    """Drives a parent and a child run under one shared budget, as a runtime would."""

    def __init__(self, budget: SharedBudget) -> None:
        self.budget = budget
        self.records: dict[str, RunRecord] = {}

    def apply(self, event: Event) -> RunRecord:
        record = self.records.get(event.run_id) or DEFAULT_REDUCER.initial(event.run_id)
        ctx = GuardContext.at_event(event, budget=self.budget)
        record = DEFAULT_REDUCER.reduce(record, event, ctx)
        self.records[event.run_id] = record
        self.budget = self.budget.charge(record)
        return record

    def refused(self, event: Event) -> GuardRejectedError:
        record = self.records[event.run_id]
        with pytest.raises(GuardRejectedError) as info:
            DEFAULT_REDUCER.reduce(record, event, GuardContext.at_event(event, budget=self.budget))
        return info.value


def _tree() -> Tree:
    return Tree(SharedBudget("parent", max_tokens=2000).spawn("child", parent="parent"))


class TestSharedBudget:
    def test_a_childs_usage_is_charged_to_the_root(self) -> None:
        """The tree's total is the parent's and the child's spending together."""
        tree = _tree()
        parent, child = new_run("parent"), new_run("child")
        model_call(parent, tokens=700)
        model_call(child, tokens=500)
        for event in [*parent.events, *child.events]:
            tree.apply(event)
        assert tree.budget.total() == Charge(tokens=1200)
        assert tree.budget.total(excluding="child") == Charge(tokens=700)

    def test_a_childs_reservation_in_flight_holds_back_the_parent(self) -> None:
        """A parent's call is refused when the child's open call reserved what it needs."""
        tree = _tree()
        parent, child = new_run("parent"), new_run("child")
        model_call(parent, tokens=1000)
        child.add("model.started", reserved_tokens=800)
        parent.add("model.started", reserved_tokens=300)
        for event in [*parent.events[:-1], *child.events]:
            tree.apply(event)
        err = tree.refused(parent.events[-1])
        assert (err.guard, err.stop_reason, err.detail) == (
            "budget",
            "budget",
            "root 'parent' (2 runs): spent 1,000 + reserved 1,100 > 2,000 tokens",
        )

    def test_a_child_refused_for_budget_stops_the_parent_for_budget(self) -> None:
        """Once the child spends the root's last tokens, both runs are refused for `budget`."""
        tree = _tree()
        parent, child = new_run("parent"), new_run("child")
        model_call(parent, tokens=1000)
        model_call(child, tokens=1000)
        child.add("model.started")
        for event in [*parent.events, *child.events[:-1]]:
            tree.apply(event)
        child_err = tree.refused(child.events[-1])
        assert child_err.detail == (
            "root 'parent' (2 runs): spent 2,000 + reserved 0 leaves nothing of 2,000 tokens"
        )
        ended = tree.apply(
            Verdict.of(child_err).terminated_event(tree.records["child"], "2026-09-01T10:00:09Z")
        )
        assert (ended.status, ended.stop_reason) == ("terminated", "budget")
        parent.add("model.started", reserved_tokens=10)
        parent_err = tree.refused(parent.events[-1])
        assert (parent_err.stop_reason, parent_err.detail) == (
            "budget",
            "root 'parent' (2 runs): spent 2,000 + reserved 10 > 2,000 tokens",
        )

    def test_the_childs_own_limit_still_applies(self) -> None:
        """A child's own `max_tokens` stops it before the root's budget is spent."""
        tree = _tree()
        child = new_run("child", limits={"max_tokens": 100})
        child.add("model.started", reserved_tokens=150)
        tree.apply(child.events[0])
        assert tree.refused(child.events[1]).detail == "spent 0 + reserved 150 > 100 tokens"

    def test_a_run_outside_the_tree_is_not_charged(self) -> None:
        """Charging a run that was never spawned is an error that says what to do."""
        budget = SharedBudget("parent", max_tokens=10)
        with value_error("run 'stray' is not part of the budget of root 'parent'; spawn it first"):
            budget.charge(DEFAULT_REDUCER.initial("stray"))

    def test_spawning_needs_a_known_parent_and_a_new_child(self) -> None:
        """A child joins once, from a run already in the tree."""
        budget = SharedBudget("root", max_cost=1.0).spawn("a", parent="root")
        with value_error("cannot spawn 'b' from 'x': 'x' is not part of the budget of root 'root'"):
            budget.spawn("b", parent="x")
        with value_error("run 'a' is already part of the budget of root 'root'"):
            budget.spawn("a", parent="root")
        assert budget.spawn("b", parent="a").parents["b"] == "a"
        assert budget.spawn("b", parent="a").runs == ("root", "a", "b")

    def test_a_shared_budget_needs_a_limit(self) -> None:
        """A budget with no limit at all is a definition error."""
        with value_error("a shared budget needs max_tokens, max_cost or both"):
            SharedBudget("root")

    def test_an_audit_charges_the_tree_in_log_order(self) -> None:
        """The child's call takes the tree past its limit (an overrun, at that event); the
        parent's next call is then refused."""
        parent, child = new_run("parent"), new_run("child")
        model_call(parent, tokens=1200)
        model_call(child, tokens=900)
        parent.add("model.started")
        log = [*parent.events[:-1], *child.events, parent.events[-1]]
        budget = SharedBudget("parent", max_tokens=2000).spawn("child", parent="parent")
        report = audit(log, budget=budget)
        assert [str(f) for f in report.findings] == [
            "run 'child', sequence 3 ('model.completed' in 'running'): overran the limit of "
            "guard 'budget' (budget): root 'parent' (2 runs): spent 2,100 > 2,000 tokens",
            "run 'parent', sequence 4 ('model.started' in 'running'): guard 'budget' would "
            "have stopped the run (budget): root 'parent' (2 runs): spent 2,100 + reserved 0 "
            "> 2,000 tokens",
        ]
