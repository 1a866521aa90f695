"""Random model behaviours, tools, policies, approvals, cancels, crashes and subagents through
the Runner: every log it writes is one `validate_lines` accepts, nothing acts twice unsafely,
and no subagent run is left open below a run that ended."""

from __future__ import annotations

import contextlib
from collections import Counter
from typing import Any

import attrs
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from agentfsm.events import Limits, Usage, step_clock
from agentfsm.guards import LoopDetector
from agentfsm.runtime import (
    ALLOW,
    Agent,
    Decision,
    ModelError,
    OutcomeUnknownError,
    ProposedCall,
    Runner,
    RunnerConfig,
    ScriptedModel,
    Tool,
    ToolContext,
    ToolError,
    approve,
    cancel,
    deny,
    needs_approval,
    reject,
    subagent,
)
from agentfsm.stores import MemoryEventStore, MemoryStorage

from .helpers import Crash, Sleeps, validate

TOOLS = ("lookup", "charge", "idem", "stop")
OUTCOMES = ("ok", "retryable", "fatal", "unknown", "raise", "crash")


@attrs.define
class World:
    """What the tools did, and what they will do next."""

    outcomes: list[str]
    storage: MemoryStorage
    i: int = 0
    effects: Counter[str] = attrs.field(factory=Counter)

    def next(self) -> str:
        outcome = self.outcomes[self.i % len(self.outcomes)]
        self.i += 1
        return outcome

    def tool(self, name: str) -> Tool:
        def fn(ctx: ToolContext) -> Any:
            if name == "stop":
                cancel(MemoryEventStore(self.storage), ctx.run_id, reason="random stop")
                return "stopping"
            outcome = self.next()
            if outcome == "crash":
                # The worker dies once here; the restarted one meets a healthy backend.
                self.outcomes[(self.i - 1) % len(self.outcomes)] = "ok"
                raise Crash
            self.effects[f"{name}:{ctx.idempotency_key}"] += 1
            if outcome == "retryable":
                raise ToolError("busy", kind="busy", retryable=True)
            if outcome == "fatal":
                raise ToolError("no", kind="refused")
            if outcome == "unknown":
                raise OutcomeUnknownError("timed out after sending")
            if outcome == "raise":
                raise RuntimeError("bug")
            return {"n": ctx.args.get("n", 0), "attempt": ctx.attempt}

        flags = {
            "lookup": {"side_effects": False, "max_attempts": 3},
            "charge": {},
            "idem": {"idempotent": True, "max_attempts": 2},
            "stop": {"side_effects": False},
        }[name]
        return Tool(name, fn, **flags)


calls = st.one_of(
    st.builds(
        ProposedCall,
        st.sampled_from((*TOOLS, "nope")),
        st.fixed_dictionaries({"n": st.integers(0, 2)}),
    ),
    st.just(ProposedCall("delegate", {"task": "help"})),  # a subagent run of its own
)
usage = st.none() | st.builds(Usage, input_tokens=st.integers(0, 400))
batches = st.builds(
    lambda cs, u: Decision.call_tools(*cs, usage=u), st.lists(calls, min_size=1, max_size=3), usage
)
# Mostly batches (where the ledger rules live); now and then an answer, a handoff, an error.
decisions = st.one_of(
    batches,
    batches,
    batches,
    st.builds(Decision.answer, st.text(max_size=5), usage=usage),
    st.sampled_from(("a", "b", "b", "zed")).map(Decision.hand_off),
    st.sampled_from((ModelError("rate limited", retryable=True), ModelError("refused"))),
)
policies = st.fixed_dictionaries({t: st.sampled_from(("allow", "deny", "approve")) for t in TOOLS})


def _policy(rules: dict[str, str]) -> Any:
    def decide(action: Any, record: Any) -> Any:
        rule = rules.get(action.tool, "allow")
        if rule == "deny":
            return deny("not today")
        if rule == "approve":
            return needs_approval()
        return ALLOW

    return decide


def _only_overruns_stopped_at_once(store: MemoryEventStore, findings: Any) -> None:
    """Every finding is a call whose usage overran the budget, and the run stopped right
    after it (`run.terminated(budget)`): an estimate can be wrong, a log never."""
    for finding in findings:
        assert (finding.kind, finding.guard, finding.event) == (
            "guard",
            "budget",
            "model.completed",
        ), finding
        after = list(store.events(finding.run_id, after=finding.sequence))
        assert [(e.type, getattr(e, "stop_reason", None)) for e in after] == [
            ("run.terminated", "budget")
        ], finding


def _tree(store: MemoryEventStore) -> list[Any]:
    """The records of r1 and of every subagent run below it."""
    return [store.load(info.run_id) for info in store.runs()]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=st.builds(lambda first, rest: [first, *rest], batches, st.lists(decisions, max_size=9)),
    outcomes=st.lists(st.sampled_from(OUTCOMES), min_size=1, max_size=6),
    rules=policies,
    verdicts=st.lists(st.booleans(), min_size=1, max_size=4),
    max_turns=st.integers(2, 8),
    max_tokens=st.none() | st.integers(200, 2000),
    loops=st.booleans(),
    wrap_up=st.booleans(),
)
def test_every_log_the_runner_writes_validates(
    script: list[Any],
    outcomes: list[str],
    rules: dict[str, str],
    verdicts: list[bool],
    max_turns: int,
    max_tokens: int | None,
    loops: bool,
    wrap_up: bool,
) -> None:
    """Whatever the model, tools and people do, the log is legal (but for a budget overrun,
    stopped right after the call) and unsafe calls ran once."""
    storage = MemoryStorage()
    store = MemoryEventStore(storage)
    world = World(outcomes, storage)
    policy = _policy(rules)
    # The subagent: the same tools and policy, its script the parent's from the end.
    clerk = Agent(
        "clerk",
        ScriptedModel(list(reversed(script)), repeat_last=True, by_turn=True),
        [world.tool(t) for t in TOOLS],
        policy,
    )
    tools = [
        *(world.tool(t) for t in TOOLS),
        subagent("delegate", clerk, limits=Limits(max_turns=3)),
    ]
    agents = [
        Agent("a", ScriptedModel(script, repeat_last=True, by_turn=True), tools, policy),
        Agent(
            "b",
            ScriptedModel(list(reversed(script)), repeat_last=True, by_turn=True),
            tools,
            policy,
        ),
    ]
    runner = Runner(
        store,
        agents,
        guards=[LoopDetector(threshold=3)] if loops else [],
        clock=step_clock(),
        sleep=Sleeps(),
        config=RunnerConfig(wrap_up_turn=wrap_up, reserve=Usage(input_tokens=100)),
    )
    limits = Limits(max_turns=max_turns, max_tokens=max_tokens)
    result = None
    with contextlib.suppress(Crash):  # the worker died; the loop below resumes it
        result = runner.run("r1", "do things", limits=limits)
    for step in range(100):  # people decide, crashed workers are resumed, until it settles
        record = store.load("r1")
        if record.status in ("completed", "failed", "cancelled", "terminated", "paused"):
            break
        waiting = [(r.run_id, a) for r in _tree(store) for a in r.pending_approvals]
        for i, (run_id, action_id) in enumerate(waiting):  # in r1, or in a subagent run
            if verdicts[(step + i) % len(verdicts)]:
                approve(store, run_id, action_id, "alice")
            else:
                reject(store, run_id, action_id, "bob", "no")
        try:
            result = runner.drive("r1")
        except Crash:
            continue
    record = store.load("r1")
    event(f"ended {record.status}")
    event(f"{len(record.actions)} actions")
    assert record.status in ("completed", "failed", "cancelled", "terminated"), record.status
    runs = _tree(store)
    event(f"{len(runs) - 1} subagent runs")
    for run in runs:  # no subagent is left open below a run that ended
        assert run.status in ("completed", "failed", "cancelled", "terminated"), run.run_id
    _only_overruns_stopped_at_once(store, validate(store, [r.run_id for r in runs]).findings)
    assert store.verify("r1").ok
    for key, times in world.effects.items():
        if key.startswith("charge:"):
            assert times == 1, (key, times)
    if result is not None and not result.superseded:
        assert all(a.status != "started" for a in record.actions.values())
