"""Fuzzing the Runner with values no log can hold, and with misdirected approvals.

Tools return, and models answer and propose, anything: NaN, infinities, lone surrogates,
integers of thousands of digits, nesting far past the limit, results over the size limit.
The properties:

- `Runner.run` and `drive` return a result; nothing raises out of them after a side effect;
- every event the store acknowledged reads back from a fresh handle, and the log validates;
- a call that needs approval runs only after an `approval.accepted` of exactly that call in
  its own run (forged and misdirected decisions included).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentfsm.errors import AgentFSMError
from agentfsm.events import Limits, call_digest, make_event
from agentfsm.events._bounds import MAX_EVENT_BYTES
from agentfsm.runtime import (
    Decision,
    ProposedCall,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolPolicy,
    approve,
    reject,
)
from agentfsm.stores import SQLiteEventStore

from .helpers import runner_for, validate

_leaves = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**3995, max_value=10**4400)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["\ud800", "\x00", "\x1b[2J"])
)
_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


class Huge:
    """Stands for a string over the event size limit (drawn small, so reprs stay short)."""

    def __repr__(self) -> str:
        return "Huge()"


def _real(value: Any) -> Any:
    return "x" * (MAX_EVENT_BYTES + 1) if isinstance(value, Huge) else value


@st.composite
def _hostile(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["value", "deep", "huge"]))
    if kind == "value":
        return draw(_values)
    if kind == "huge":
        return Huge()
    value: Any = 1
    for _ in range(draw(st.sampled_from([99, 101, 1000]))):
        value = [value]
    return value


_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_SETTINGS
@given(
    result=_hostile(),
    output=_hostile(),
    argument=_hostile(),
    where=st.sampled_from(["result", "output", "argument"]),
)
def test_hostile_values_from_tools_and_models_never_break_a_run(
    tmp_path_factory: Any, result: Any, output: Any, argument: Any, where: str
) -> None:
    """Whichever of the tool's result, the model's answer or a proposed argument is hostile,
    the run ends with a result, and its log reads back and validates."""
    path: Path = tmp_path_factory.mktemp("fuzz") / "runs.db"
    effects: Counter[str] = Counter()
    result, output, argument = _real(result), _real(output), _real(argument)

    def lookup(ctx: ToolContext) -> Any:
        effects[ctx.idempotency_key] += 1
        return result if where == "result" else {"ok": True}

    arguments = {"q": argument if where == "argument" else "fine"}
    model = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("lookup", arguments)),
            Decision.answer(output if where == "output" else "done"),
        ]
    )
    with SQLiteEventStore(path) as store:
        runner = runner_for(store, model, [Tool("lookup", lookup)])
        outcome = runner.run("r1", limits=Limits(max_turns=4))
        assert outcome.status in ("completed", "failed")
        assert runner.drive("r1").status == outcome.status
    with SQLiteEventStore(path) as fresh:
        stored = list(fresh.events("r1"))
        assert fresh.load("r1").status == outcome.status
        assert fresh.verify("r1").ok
        assert validate(fresh, ["r1"]).ok
    assert all(n == 1 for n in effects.values())
    if outcome.status == "failed":
        assert stored[-1].type == "run.failed"


@_SETTINGS
@given(
    amounts=st.lists(st.integers(min_value=1, max_value=10**6), min_size=2, max_size=3),
    decisions=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=2),  # whose run the decision is appended to
            st.integers(min_value=0, max_value=2),  # whose call it was made on
            st.sampled_from(["approve", "reject", "forge"]),
        ),
        max_size=6,
    ),
)
def test_a_charge_runs_only_on_an_approval_of_exactly_that_call(
    tmp_path_factory: Any, amounts: list[int], decisions: list[tuple[int, int, str]]
) -> None:
    """Runs with the same action ids; approvals, rejections and forged copies of another
    run's approval land anywhere. A charge runs iff its own run accepted its own call."""
    path: Path = tmp_path_factory.mktemp("fuzz") / "runs.db"
    charged: list[tuple[str, int]] = []

    def charge(ctx: ToolContext) -> Any:
        charged.append((ctx.run_id, ctx.args["amount"]))
        return {"charged": ctx.args["amount"]}

    def runner(store: Any, amount: int) -> Any:
        model = ScriptedModel(
            [Decision.call_tools(ProposedCall("charge", {"amount": amount})), Decision.answer("ok")]
        )
        return runner_for(
            store, model, [Tool("charge", charge)], policy=ToolPolicy(approval={"charge"})
        )

    runs = [f"run-{i}" for i in range(len(amounts))]
    with SQLiteEventStore(path) as store:
        for run_id, amount in zip(runs, amounts, strict=False):
            runner(store, amount).run(run_id)
        for target, source, how in decisions:
            target, source = target % len(runs), source % len(runs)
            digest = call_digest("charge", {"amount": amounts[source]})
            try:
                if how == "approve":
                    approve(store, runs[target], "t1.1", "ann", digest=digest)
                elif how == "reject":
                    reject(store, runs[target], "t1.1", "ann", "no", digest=digest)
                else:
                    record = store.load(runs[target])
                    forged = make_event(
                        "approval.accepted",
                        run_id=runs[target],
                        sequence=record.version + 1,
                        occurred_at="2026-09-01T10:30:00Z",
                        action_id="t1.1",
                        approver="mallory",
                        arguments_digest=digest,
                    )
                    store.append(runs[target], [forged], record.version)
            except AgentFSMError:
                pass
        for run_id, amount in zip(runs, amounts, strict=False):
            runner(store, amount).drive(run_id)
        accepted = {
            run_id: [
                e.arguments_digest for e in store.events(run_id) if e.type == "approval.accepted"
            ]
            for run_id in runs
        }
        assert validate(store, runs).ok
    expected = [
        (run_id, amount)
        for run_id, amount in zip(runs, amounts, strict=False)
        if call_digest("charge", {"amount": amount}) in accepted[run_id]
    ]
    assert sorted(charged) == sorted(expected)
    for run_id in runs:
        assert all(
            d == call_digest("charge", {"amount": amounts[runs.index(run_id)]})
            for d in accepted[run_id]
        )
