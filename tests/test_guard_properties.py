"""Properties of the guards: limits hold at every accepted event, loops always trip, laws."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm import Event, GuardRejectedError, RunRecord
from agentfsm.events import canonical_json, make_event
from agentfsm.guards import (
    Budget,
    GuardContext,
    LoopDetector,
    MaxTurns,
    Verdict,
    all_of,
    any_of,
    fingerprint,
    fingerprints,
)
from agentfsm.reducers import Reducer
from tests.guardlogs import T0

SETTINGS = settings(max_examples=150, deadline=None)


class Driver:
    """Plays steps into a run the way a runtime would: a refusal ends it with `run.terminated`."""

    def __init__(self, reducer: Reducer, **started: Any) -> None:
        self.reducer = reducer
        self.record = reducer.initial("run_p")
        self.accepted: list[tuple[Event, RunRecord]] = []
        self.stopped: GuardRejectedError | None = None
        self.add("run.started", **started)

    def add(self, type_: str, **fields: Any) -> bool:
        """Apply one event; False (and the run terminated) when a guard refuses it."""
        if self.stopped is not None:
            return False
        event = self._event(type_, **fields)
        try:
            self.record = self.reducer.reduce(self.record, event)
        except GuardRejectedError as exc:
            self.stopped = exc
            end = self._event("run.terminated", stop_reason=exc.stop_reason, detail=exc.detail)
            self.record = self.reducer.reduce(self.record, end)
            return False
        self.accepted.append((event, self.record))
        return True

    def _event(self, type_: str, **fields: Any) -> Event:
        at = T0 + timedelta(seconds=self.record.version)
        return make_event(
            type_,
            run_id="run_p",
            sequence=self.record.version + 1,
            occurred_at=at.isoformat(),
            **fields,
        )

    def tool(self, action_id: str, tool: str, arguments: Any, result: Any, fail: bool) -> bool:
        if not self.add("tool.requested", action_id=action_id, tool=tool, arguments=arguments):
            return False
        if not self.add("tool.started", action_id=action_id):
            return False
        if fail:
            error = {"kind": "x", "message": "failed", "retryable": False}
            return self.add("tool.failed", action_id=action_id, error=error)
        return self.add("tool.completed", action_id=action_id, result=result)


STEPS = st.lists(st.sampled_from(["model", "tool", "handoff", "pause"]), max_size=30)


class TestTurns:
    @SETTINGS
    @given(limit=st.integers(1, 6), steps=STEPS, own=st.booleans())
    def test_a_run_never_gets_past_max_turns(self, limit: int, steps: list[str], own: bool) -> None:
        """Whatever the run does, it makes at most `limit` model calls, and stops for it."""
        reducer = Reducer() if own else Reducer(guards=[MaxTurns(limit)])
        run = Driver(reducer, limits={"max_turns": limit} if own else None)
        for i, step in enumerate(steps):
            if step == "model":
                run.add("model.started") and run.add(
                    "model.completed", decision="final", output="x"
                )
            elif step == "tool":
                run.tool(f"a{i}", "t", {"i": i}, i, False)
            elif step == "handoff":
                run.add("handoff", to_agent=f"agent{i}")
            else:
                run.add("run.paused", reason="wait") and run.add("run.resumed")
            assert run.record.turn <= limit
        if steps.count("model") > limit:
            assert run.stopped is not None
            assert (run.record.status, run.record.stop_reason) == ("terminated", "max_turns")
            assert run.record.stop_detail == f"{limit} of {limit} turns used"
        else:
            assert run.stopped is None


CALLS = st.lists(
    st.tuples(
        st.integers(0, 400),  # reserved tokens
        st.integers(0, 100),  # percent of the reservation actually used
        st.integers(0, 40),  # reserved cost, in hundredths
    ),
    max_size=20,
)


class TestBudget:
    @SETTINGS
    @given(max_tokens=st.integers(0, 2000), max_cost=st.integers(0, 300), calls=CALLS)
    def test_spent_plus_reserved_never_exceeds_the_budget(
        self, max_tokens: int, max_cost: int, calls: list[tuple[int, int, int]]
    ) -> None:
        """When calls use no more than they reserve, no accepted event leaves the run over."""
        limit_cost = max_cost / 100
        run = Driver(Reducer(guards=[Budget(max_tokens, limit_cost)]))
        for reserve, used, cents in calls:
            if not run.add("model.started", reserved_tokens=reserve, reserved_cost=cents / 100):
                break
            usage = {
                "input_tokens": reserve * used // 100,
                "output_tokens": 0,
                "cost": cents * used / 10_000,
            }
            run.add("model.completed", decision="final", output="x", usage=usage)
        for _, record in run.accepted:
            assert record.usage.total_tokens + record.reserved_tokens <= max_tokens
            assert record.usage.cost + record.reserved_cost <= limit_cost + 1e-9
        if run.stopped is not None:
            assert run.record.stop_reason == "budget"

    @SETTINGS
    @given(max_tokens=st.integers(0, 2000), calls=CALLS)
    def test_an_accepted_call_always_fits_what_is_left(
        self, max_tokens: int, calls: list[tuple[int, int, int]]
    ) -> None:
        """Even when calls overrun their estimates, each accepted call fitted when it started."""
        run = Driver(Reducer(guards=[Budget(max_tokens=max_tokens)]))
        for reserve, used, _ in calls:
            if not run.add("model.started", reserved_tokens=reserve):
                break
            usage = {"input_tokens": reserve * used // 50, "output_tokens": 0}  # up to 2x
            run.add("model.completed", decision="final", output="x", usage=usage)
        for event, record in run.accepted:
            if event.type == "model.started":
                assert record.usage.total_tokens + record.reserved_tokens <= max_tokens


TOOLS = st.sampled_from(["search", "fetch", "status"])
ARGS = st.sampled_from([{"q": 1}, {"q": 2}, {"q": 1, "page": 2}])
RESULTS = st.sampled_from([None, "a", "b", {"n": 1}])
ACTIONS = st.lists(st.tuples(TOOLS, ARGS, RESULTS, st.booleans()), max_size=25)


def _reference_trips(record: RunRecord, tool: str, arguments: Any, k: int, w: int) -> bool:
    """The naive definition: `k` actions with one fingerprint among the last `w`."""
    prints = [fp for _, fp in fingerprints(record)]
    mine = fingerprint(tool, arguments, _observations(record))
    return prints[-(w - 1) :].count(mine) + 1 >= k


def _observations(record: RunRecord) -> int:
    count = 0
    last: dict[str, Any] = {}
    for action in record.actions.values():
        if action.status == "succeeded":
            if action.tool not in last or canonical_json(last[action.tool]) != canonical_json(
                action.result
            ):
                count += 1
            last[action.tool] = action.result
    return count


class TestLoops:
    @SETTINGS
    @given(k=st.integers(2, 4), w=st.integers(4, 8), actions=ACTIONS, tool=TOOLS, arguments=ARGS)
    def test_the_detector_agrees_with_the_fingerprint_definition(
        self, k: int, w: int, actions: list[Any], tool: str, arguments: Any
    ) -> None:
        """Refused exactly when `k` actions of the window would share a fingerprint."""
        run = Driver(Reducer(run_limits=False))  # no detector: any history can be built
        for i, (t, a, result, fail) in enumerate(actions):
            run.tool(f"a{i}", t, a, result, fail)
        detector = LoopDetector(threshold=k, window=w)
        event = make_event(
            "tool.requested",
            run_id="run_p",
            sequence=run.record.version + 1,
            occurred_at=T0.isoformat(),
            action_id="p",
            tool=tool,
            arguments=arguments,
        )
        verdict = detector.check(run.record, event, GuardContext(T0))
        assert (verdict is not None) == _reference_trips(run.record, tool, arguments, k, w)

    @SETTINGS
    @given(
        k=st.integers(2, 5),
        prefix=ACTIONS,
        result=st.one_of(st.none(), RESULTS),
        fail=st.booleans(),
    )
    def test_a_loop_of_identical_no_progress_calls_always_trips(
        self, k: int, prefix: list[Any], result: Any, fail: bool
    ) -> None:
        """Repeating one call with one outcome is stopped: at the k-th call, or the (k+1)-th
        when the first call's result was a new observation."""
        run = Driver(Reducer(guards=[LoopDetector(threshold=k, window=k + 1)]))
        for i, (t, a, r, f) in enumerate(prefix):
            run.tool(f"p{i}", t, a, r, f)
        if run.stopped is not None:
            return  # the prefix itself looped; nothing left to test
        made = 0
        while run.stopped is None and made <= k + 1:
            run.tool(f"loop{made}", "repeat", {"same": True}, result, fail)
            made += 1
        assert run.stopped is not None
        assert run.stopped.stop_reason == "loop_detected"
        assert made == (k if fail else k + 1)

    @SETTINGS
    @given(k=st.integers(2, 4), n=st.integers(1, 30))
    def test_a_changing_result_never_trips(self, k: int, n: int) -> None:
        """A call whose result differs every time is never a loop, however long it goes."""
        run = Driver(Reducer(guards=[LoopDetector(threshold=k, window=k)]))
        for i in range(n):
            assert run.tool(f"c{i}", "poll", {"job": 7}, {"progress": i}, False)


JSONS = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
ARGUMENTS = st.dictionaries(st.text(max_size=3), JSONS, max_size=4)


def _respell(value: Any, rnd: st.DataObject) -> Any:
    """The same JSON value with keys reordered and integers sometimes written as floats."""
    if isinstance(value, dict):
        keys = rnd.draw(st.permutations(list(value)))
        return {k: _respell(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [_respell(v, rnd) for v in value]
    if value.__class__ is int and rnd.draw(st.booleans()):
        return float(value)
    return value


class TestFingerprints:
    @SETTINGS
    @given(arguments=ARGUMENTS, data=st.data(), indent=st.sampled_from([None, 1, 4]))
    def test_spelling_does_not_change_a_fingerprint(
        self, arguments: dict[str, Any], data: st.DataObject, indent: int | None
    ) -> None:
        """Key order, whitespace and `1` vs `1.0` leave the fingerprint as it was."""
        respelt = json.loads(json.dumps(_respell(arguments, data), indent=indent))
        assert fingerprint("t", respelt, 3) == fingerprint("t", arguments, 3)

    @SETTINGS
    @given(a=ARGUMENTS, b=ARGUMENTS)
    def test_different_values_give_different_fingerprints(
        self, a: dict[str, Any], b: dict[str, Any]
    ) -> None:
        """Arguments that differ as JSON values (a bool is not a number) differ in print."""
        same = json.dumps(_ints(a), sort_keys=True) == json.dumps(_ints(b), sort_keys=True)
        assert (fingerprint("t", a, 0) == fingerprint("t", b, 0)) == same


def _ints(value: Any) -> Any:
    # Mark bools so that json.dumps cannot confuse True with 1 in the comparison above.
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_ints(v) for v in value]
    return value


@attrs.frozen
class Fixed:
    """A guard with a fixed answer."""

    trips: bool
    label: str
    name: str = "g"

    def check(self, record: Any, event: Any, ctx: GuardContext) -> Verdict | None:
        return Verdict(self.name, self.label, self.label) if self.trips else None


MEMBERS = st.lists(
    st.builds(Fixed, trips=st.booleans(), label=st.sampled_from("abcdef")), min_size=1, max_size=5
)


class TestComposition:
    CTX = GuardContext(T0)

    @SETTINGS
    @given(members=MEMBERS)
    def test_any_of_trips_iff_some_member_trips(self, members: list[Fixed]) -> None:
        """`any_of` is "or", and answers with the first tripping member's verdict."""
        verdict = any_of(*members).check(None, None, self.CTX)  # type: ignore[arg-type]
        tripping = [m for m in members if m.trips]
        assert (verdict is not None) == bool(tripping)
        if tripping:
            assert verdict == Verdict("g", tripping[0].label, tripping[0].label)

    @SETTINGS
    @given(members=MEMBERS)
    def test_all_of_trips_iff_every_member_trips(self, members: list[Fixed]) -> None:
        """`all_of` is "and"."""
        verdict = all_of(*members).check(None, None, self.CTX)  # type: ignore[arg-type]
        assert (verdict is not None) == all(m.trips for m in members)

    @SETTINGS
    @given(a=MEMBERS, b=MEMBERS)
    def test_nesting_does_not_change_the_decision(self, a: list[Fixed], b: list[Fixed]) -> None:
        """any_of(any_of(a), any_of(b)) decides like any_of(a + b); the same for all_of."""
        ctx = self.CTX
        for combine in (any_of, all_of):
            nested = combine(combine(*a), combine(*b)).check(None, None, ctx)  # type: ignore[arg-type]
            flat = combine(*a, *b).check(None, None, ctx)  # type: ignore[arg-type]
            assert (nested is None) == (flat is None)
