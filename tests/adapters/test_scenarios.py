"""The adapters' shared scenarios, written once and run through every SDK's real runner.

Each test drives a scripted agent (`_drivers`) through each driver; an SDK that cannot
express a scenario skips it, saying why. What only one SDK has stays in its own module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import pytest

from agentfsm.adapters.openai_agents import ApprovalMismatchError, SavedStateError
from agentfsm.errors import IllegalTransitionError
from agentfsm.events import Limits, Proposal, Refusal, dump_event, step_clock
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import State, TransitionTable
from agentfsm.guards import LoopDetector, MaxTurns
from agentfsm.names import StateKind
from agentfsm.reducers.reduce import Reducer
from agentfsm.runtime import (
    Agent,
    Decision,
    ProposedCall,
    Runner,
    RunResult,
    ScriptedModel,
    ToolPolicy,
    approve,
    cancel,
    reject,
    subagent,
)
from agentfsm.runtime import Tool as RunnerTool
from agentfsm.stores import MemoryEventStore, SQLiteEventStore, StoreOptions
from agentfsm.stores.base import EventStore
from tests.adapters._common import (
    assert_caller_and_child_finished,
    assert_caller_waits_on_child,
    assert_free_call_ran_then_paused,
    assert_refunded_after_approval,
    assert_tree_stopped,
    decide_for_child,
    refund_waiting_in,
    types,
    validates,
)
from tests.adapters._drivers import (
    CALLS,
    DRIVERS,
    REFUND,
    AgentSpec,
    Call,
    Driver,
    Step,
    Sub,
    Tool,
    agent,
    batch,
    call,
    make_driver,
    require,
    resume_in_new_process,
    say,
)


@pytest.fixture(params=sorted(DRIVERS))
def driver(request: pytest.FixtureRequest, tmp_path: Path) -> Driver:
    """Each SDK's driver in turn (skipped when its SDK is not installed)."""
    pytest.importorskip(DRIVERS[request.param])
    return make_driver(request.param, tmp_path)


def looping(n: int = 5, city: str | None = None) -> AgentSpec:
    """An agent asking for the weather in C0, C1, ... (or always `city`), never answering."""
    steps = [call("get_weather", f"call_{i}", city=city or f"C{i}") for i in range(n)]
    return agent("weather", *steps)


class TestToolLoop:
    """A model that calls tools until it answers."""

    def test_a_tool_loop_with_a_failing_tool_ends_in_a_final_answer(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """Model → tool → model → failing tool → model: call ids kept, the failure recorded,
        usage added up, a legal log."""
        store = MemoryEventStore()
        spec = agent(
            "weather",
            call("get_weather", "call_1", city="Paris"),
            call("get_weather", "call_2", city="Atlantis"),
            say("Sunny in Paris."),
        )
        done = driver.run(store, "r1", spec)
        assert (done.status, done.final_output) == ("completed", "Sunny in Paris.")
        assert types(store, "r1") == [
            "run.started", "model.started", "model.completed", "tool.requested", "tool.started",
            "tool.completed", "model.started", "model.completed", "tool.requested", "tool.started",
            "tool.failed", "model.started", "model.completed", "run.completed",
        ]  # fmt: skip
        action = done.record.actions["call_1"]
        assert (action.tool, action.arguments, action.result) == (
            "get_weather",
            {"city": "Paris"},
            "sunny in Paris",
        )
        error = done.record.actions["call_2"].error
        assert (error.kind, error.message) == (driver.failed_kind, "no such city")
        assert (done.record.usage.input_tokens, done.record.usage.output_tokens) == (30, 15)
        assert validates(store, "r1", tmp_path) == 0

    def test_a_tool_result_no_log_can_hold_is_a_failed_call(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """A tool returns NaN: the log records the call as failed with the reason (it ran; its
        result cannot be stored), the run goes on, and every line reads back."""
        require(driver, "unstorable_result")

        def measure(q: str) -> dict[str, float]:
            """Measure something (the sensor is broken)."""
            return {"value": float("nan")}

        store = MemoryEventStore()
        spec = agent(
            "a",
            call("measure", "call_1", q="x"),
            say("Broken sensor."),
            tools=(Tool("measure", measure),),
        )
        done = driver.run(store, "r1", spec)
        assert done.status == "completed"
        error = done.record.actions["call_1"].error
        assert error is not None
        assert (error.kind, error.message, error.retryable) == (
            "unstorable_result",
            "the tool ran, but its result cannot be stored: the value at 'value' is nan, which "
            "JSON cannot hold (numbers must be finite)",
            False,
        )
        assert validates(store, "r1", tmp_path) == 0


class TestGuardStops:
    """Our guards and limits stop an SDK run and say why."""

    def test_our_max_turns_stops_the_run_keeping_the_partial_output(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """MaxTurns(2) refuses the third model call: run.terminated, the last tool result kept."""
        store = MemoryEventStore()
        done = driver.run(store, "r1", looping(), guards=[MaxTurns(2)])
        assert (done.status, done.stop_reason, done.record.stop_detail) == (
            "terminated",
            "max_turns",
            "2 of 2 turns used",
        )
        assert done.partial_output == "sunny in C1"
        assert CALLS == ["get_weather C0", "get_weather C1"]
        assert types(store, "r1")[-2:] == ["tool.completed", "run.terminated"]
        assert validates(store, "r1", tmp_path) == 0

    def test_a_token_budget_stops_the_run_right_after_the_call_that_overran_it(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """limits.max_tokens=25 with 15 tokens a call: the second call overruns it (30 > 25); the
        run stops right after it, its answer recorded, its call never run; validate says so."""
        store = MemoryEventStore()
        done = driver.run(store, "r1", looping(), limits=Limits(max_tokens=25))
        assert (done.status, done.stop_reason, done.record.stop_detail) == (
            "terminated",
            "budget",
            "spent 30 > 25 tokens",
        )
        assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.terminated"]
        assert done.record.actions["call_1"].status == "rejected"  # proposed, never run
        assert CALLS == ["get_weather C0"]
        assert validates(store, "r1", tmp_path) == 1

    def test_a_single_answer_that_overruns_the_budget_ends_the_run_keeping_it(
        self, driver: Driver
    ) -> None:
        """One 15-token answer under max_tokens=10: recorded, then run.terminated(budget) at once."""
        store = MemoryEventStore()
        spec = agent("weather", say("Sunny."))
        done = driver.run(store, "r1", spec, limits=Limits(max_tokens=10))
        assert (done.status, done.stop_reason, done.record.stop_detail) == (
            "terminated",
            "budget",
            "spent 15 > 10 tokens",
        )
        assert types(store, "r1") == [
            "run.started", "model.started", "model.completed", "run.terminated",
        ]  # fmt: skip
        assert (done.record.final_output, done.partial_output) == ("Sunny.", "Sunny.")

    def test_a_reservation_stops_the_model_call_that_could_overspend(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """reserve_tokens=15 under max_tokens=40: the third call (30 + 15 > 40) is never made."""
        store = MemoryEventStore()
        done = driver.run(store, "r1", looping(), limits=Limits(max_tokens=40), reserve_tokens=15)
        assert (done.status, done.stop_reason, done.record.stop_detail) == (
            "terminated",
            "budget",
            "spent 30 + reserved 15 > 40 tokens",
        )
        spent = 30 + driver.refused_call_tokens  # the SDK's figure, if it sent the call
        assert done.record.usage.input_tokens + done.record.usage.output_tokens == spent
        started = [e for e in store.events("r1") if e.type == "model.started"]
        assert [e.reserved_tokens for e in started] == [15, 15]
        # A refused call the SDK sent all the same took the run past its limit: reported.
        assert validates(store, "r1", tmp_path) == (1 if driver.refused_call_tokens else 0)

    def test_a_loop_of_identical_calls_is_stopped_before_the_tool_runs_again(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """LoopDetector(threshold=2): the same call with nothing new observed is refused before
        it runs. The first result is a new observation, so the second call is progress; the
        third is not."""
        store = MemoryEventStore()
        done = driver.run(store, "r1", looping(city="Paris"), guards=[LoopDetector(threshold=2)])
        assert (done.status, done.stop_reason) == ("terminated", "loop_detected")
        assert CALLS == ["get_weather Paris", "get_weather Paris"]
        assert types(store, "r1")[-3:] == ["model.started", "model.completed", "run.terminated"]
        assert validates(store, "r1", tmp_path) == 0

    def test_a_deadline_on_the_injected_clock_stops_the_run(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """limits.deadline 10:00:04 on a clock ticking 1 s per append: a call at/after it is
        refused."""
        from agentfsm.events import step_clock

        store = MemoryEventStore()
        limits = Limits(deadline="2026-09-01T10:00:04Z")
        done = driver.run(store, "r1", looping(3), limits=limits, clock=step_clock())
        assert (done.status, done.stop_reason) == ("terminated", "deadline")
        assert done.record.stop_detail == (
            "deadline 2026-09-01T10:00:04+00:00 reached at 2026-09-01T10:00:05+00:00 (1 s past it)"
        )
        assert types(store, "r1")[-2:] == ["tool.completed", "run.terminated"]
        assert validates(store, "r1", tmp_path) == 0


#: What a cap of 64 tells a model that proposed 1,000 calls.
OVER_64 = (
    "1,000 calls proposed in one decision; at most 64 are allowed: none of them ran, "
    "propose at most 64 at a time"
)


def thousand(tool: str) -> tuple[Call, ...]:
    """One answer of 1,000 calls to `tool` (`refund` needs approval, `get_weather` not)."""
    key = "order_id" if tool == "refund" else "city"
    return tuple(Call(tool, f"call_{i}", {key: f"X-{i}"}) for i in range(1000))


class TestCallsPerDecision:
    """An answer over the cap is refused: none of its calls runs or waits for a person, the
    model reads why, and the run goes on to its end."""

    @pytest.mark.parametrize("tool", ["refund", "get_weather"])
    def test_an_answer_of_a_thousand_calls_is_refused_and_the_model_told_why(
        self, driver: Driver, tmp_path: Path, tool: str
    ) -> None:
        """1,000 calls (needing approval, or not): recorded once as refused, each call answered
        with the refusal before it runs, the log a kilobyte or so; the model answers next."""
        store = MemoryEventStore()
        batch = thousand(tool)
        spec = agent("support", batch, say("One at a time, then."))
        done = driver.run(store, "r1", spec)
        assert (done.status, done.final_output, done.pending_approvals) == (
            "completed",
            "One at a time, then.",
            (),
        )
        assert CALLS == []
        assert types(store, "r1") == [
            "run.started", "model.started", "model.completed",
            "model.started", "model.completed", "run.completed",
        ]  # fmt: skip
        refused = list(store.events("r1"))[2]
        assert (refused.decision, refused.refusal) == (
            "refused",
            Refusal(
                kind="max_calls_per_decision",
                message=OVER_64,
                proposed=Proposal(decision="tool_calls", calls=1000, tools={tool: 1000}),
            ),
        )
        assert dict(done.record.actions) == {}
        assert done.record.usage.input_tokens == 20  # both answers count
        seen = driver.seen("support")
        assert all(OVER_64 in seen[c.call_id] for c in batch)
        size = sum(len(dump_event(e).encode()) + 1 for e in store.events("r1"))
        assert size < 2_000
        assert validates(store, "r1", tmp_path) == 0

    def test_the_cap_is_the_adapters_option(self, driver: Driver) -> None:
        """`max_calls_per_decision=2` refuses three calls; None lets them run."""
        batch = tuple(Call("get_weather", f"call_{i}", {"city": f"C{i}"}) for i in range(3))
        spec = agent("support", batch, say("Done."))
        capped = driver.run(MemoryEventStore(), "r1", spec, max_calls_per_decision=2)
        assert (capped.status, capped.record.actions) == ("completed", {})
        assert CALLS == []
        lifted = driver.run(MemoryEventStore(), "r2", spec, max_calls_per_decision=None)
        assert lifted.status == "completed"
        # In any order: LangGraph's ToolNode runs a batch's calls on threads at once.
        assert sorted(CALLS) == ["get_weather C0", "get_weather C1", "get_weather C2"]


class TestTurnCap:
    """Every adapter caps turns as the Runner does, in the run's `limits` (issue 26, item 3)."""

    def test_a_run_is_capped_at_100_turns_unless_told(self, driver: Driver) -> None:
        """The default is written into the log; `max_turns=None` writes none."""
        spec = agent("weather", say("Sunny."))
        capped = driver.run(MemoryEventStore(), "r1", spec)
        assert capped.record.limits == Limits(max_turns=100, max_calls_per_decision=64)
        lifted = driver.run(MemoryEventStore(), "r2", spec, max_turns=None)
        assert lifted.record.limits == Limits(max_calls_per_decision=64)

    def test_the_cap_stops_a_model_that_never_answers(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """`max_turns=3`: the fourth model call is refused, the run ends `max_turns`."""
        store = MemoryEventStore()
        done = driver.run(store, "r1", looping(), max_turns=3)
        assert (done.status, done.stop_reason, done.record.stop_detail) == (
            "terminated",
            "max_turns",
            "3 of 3 turns used",
        )
        assert CALLS == ["get_weather C0", "get_weather C1", "get_weather C2"]
        assert validates(store, "r1", tmp_path) == 0


class TestCancel:
    """A cancel asked for from elsewhere ends the run at its next signal."""

    def test_a_cancel_from_elsewhere_stops_the_run_at_its_next_signal(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """A cancel appended while a tool runs: its result is kept, the next model call never
        starts."""
        store = MemoryEventStore()

        def slow_lookup(q: str) -> str:
            """Look something up (meanwhile, someone cancels the run)."""
            cancel(store, "r1", reason="user closed the tab", requested_by="ui")
            return f"found {q}"

        spec = agent(
            "a",
            call("slow_lookup", "call_1", q="x"),
            say("never said"),
            tools=(Tool("slow_lookup", slow_lookup),),
        )
        done = driver.run(store, "r1", spec, prompt="look")
        assert (done.status, done.record.cancel_reason) == ("cancelled", "user closed the tab")
        assert done.record.actions["call_1"].result == "found x"
        assert types(store, "r1")[-3:] == [
            "run.cancel_requested", "tool.completed", "run.cancelled",
        ]  # fmt: skip
        assert validates(store, "r1", tmp_path) == 0


#: An agent that asks to refund O-1 (which needs approval), then answers.
REFUNDING = agent("refunds", call("refund", "call_r1", order_id="O-1"), say("Done."))
#: The refund agent as a new process rebuilds it: only the answer after the tool is left.
RESUMED = agent("refunds", say("Done."))


def pause_for_refund(driver: Driver, store: EventStore) -> Any:
    """Run r1 of `REFUNDING`: it waits for approval of call_r1."""
    paused = driver.run(store, "r1", REFUNDING, prompt="refund O-1")
    assert (paused.status, paused.record.pending_approvals) == ("waiting_approval", ("call_r1",))
    return paused


#: The refund of O-1 as run r1 waits for it, whoever drives the run.
R1_REFUND = refund_waiting_in("r1")


def runner_refunds() -> Agent:
    """`REFUNDING` for our own Runner: call_r1 refunds O-1 (needs approval), then "Done."."""
    script = ScriptedModel(
        [
            Decision.call_tools(ProposedCall("refund", {"order_id": "O-1"}, action_id="call_r1")),
            Decision.answer("Done."),
        ]
    )
    refund_tool = RunnerTool("refund", lambda ctx: "refunded")
    return Agent("refunds", script, [refund_tool], policy=ToolPolicy(approval={"refund"}))


def runner_paused(run_id: str, agent_: Agent) -> RunResult:
    """Our own Runner's result for `agent_`'s run `run_id`, driven until it waits."""
    return Runner(MemoryEventStore(), agent_, clock=step_clock()).run(run_id, "refund O-1")


def reviewed_table() -> TransitionTable:
    """The default table with approvals waiting in a state of its own, `needs_review`."""
    old, new = "waiting_approval", "needs_review"
    moved = [
        attrs.evolve(
            t,
            source=new if t.source == old else t.source,
            target=new if t.target == old else t.target,
        )
        for t in DEFAULT_TABLE.transitions
        if old in (t.source, t.target)
    ]
    return DEFAULT_TABLE.derive(
        name="reviewed",
        remove_states=[old],
        add_states=[State(new, kind=StateKind.WAITING, description="a reviewer decides")],
        add=moved,
    )


def no_approvals_store() -> MemoryEventStore:
    """A store whose lifecycle has no human approvals."""
    no_approvals = DEFAULT_TABLE.derive(
        name="no_approvals",
        remove=[
            ("running", "approval.requested", "waiting_approval"),
            ("waiting_tool", "approval.requested", "waiting_tool"),
            ("waiting_tool", "approval.requested", "waiting_approval"),
        ],
    )
    return MemoryEventStore(options=StoreOptions(reducer=Reducer(no_approvals)))


def saved(driver: Driver, paused: Any) -> str | None:
    """The SDK state the pause returned, as a caller saves it (None: the SDK keeps it)."""
    return driver.state_text(paused) if driver.state_name else None


class TestApproval:
    """A call that needs approval pauses the run; a decision in our store resumes it."""

    def test_an_approved_call_runs_when_driven_on_in_a_new_process(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """The run pauses; approve() in our store; a new process resumes from our store alone
        and runs the call; once it ends, no SDK state is kept."""
        db = tmp_path / "runs.db"
        store = SQLiteEventStore(db)
        paused = pause_for_refund(driver, store)
        assert CALLS == []
        approve(store, "r1", "call_r1", approver="alice")
        if driver.state_name is not None:
            kept = store.attachment("r1", driver.state_name)
            assert kept is not None
            assert kept.version == store.load("r1").version - 1
            assert kept.data.decode() == driver.state_text(paused)
        out = resume_in_new_process(driver, tmp_path, db, "r1", RESUMED, None)
        assert out == {"status": "completed", "final_output": "Done.", "calls": ["refund O-1"]}
        if driver.state_name is not None:
            assert store.attachment("r1", driver.state_name) is None
        assert types(store, "r1")[3:] == [
            "approval.requested", "approval.accepted", "tool.requested", "tool.started",
            "tool.completed", "model.started", "model.completed", "run.completed",
        ]  # fmt: skip
        assert validates(store, "r1", tmp_path) == 0

    def test_a_rejected_call_never_runs_and_the_model_reads_the_reason(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """reject() in our store; a new process resumes from the saved state and tells the SDK;
        the tool never runs."""
        db = tmp_path / "runs.db"
        store = SQLiteEventStore(db)
        paused = pause_for_refund(driver, store)
        reject(store, "r1", "call_r1", approver="bob", reason="over the limit")
        out = resume_in_new_process(driver, tmp_path, db, "r1", RESUMED, saved(driver, paused))
        assert out == {"status": "completed", "final_output": "Done.", "calls": []}
        action = store.load("r1").actions["call_r1"]
        assert (action.status, action.reason) == ("rejected", "over the limit")
        assert validates(store, "r1", tmp_path) == 0

    def test_a_run_cancelled_while_it_waits_ends_cancelled_on_drive(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """Nothing drives a paused run: a new process's resume settles the cancel; the call
        never runs."""
        db = tmp_path / "runs.db"
        store = SQLiteEventStore(db)
        pause_for_refund(driver, store)
        cancel(store, "r1", reason="the customer left")
        out = resume_in_new_process(driver, tmp_path, db, "r1", RESUMED, None)
        assert out == {"status": "cancelled", "final_output": None, "calls": []}
        action = store.load("r1").actions["call_r1"]
        assert (action.status, action.reason) == ("rejected", "the run ended before it ran")
        if driver.state_name is not None:
            assert store.attachment("r1", driver.state_name) is None
        assert validates(store, "r1", tmp_path) == 0

    def test_sync_run_and_drive_go_through_the_same_run_without_an_event_loop(
        self, driver: Driver
    ) -> None:
        """From code without an event loop, the run pauses for approval, then resumes to its
        answer."""
        store = MemoryEventStore()
        paused = driver.run_without_loop(store, "r1", REFUNDING, "refund O-1")
        approve(store, "r1", "call_r1", approver="alice")
        done = driver.drive_without_loop(store, "r1", RESUMED)
        assert (paused.status, done.status, done.final_output) == (
            "waiting_approval",
            "completed",
            "Done.",
        )

    def test_a_pause_lists_its_call_as_the_runner_does(self, driver: Driver) -> None:
        """The adapter's result names the waiting call exactly as our Runner's result does:
        one `PendingApproval`, with the digest a decision is bound to."""
        paused = pause_for_refund(driver, MemoryEventStore())
        ours = runner_paused("r1", runner_refunds())
        assert paused.pending_approvals == ours.pending_approvals == (R1_REFUND,)
        assert paused.waiting is ours.waiting is True

    def test_a_pause_in_a_waiting_state_of_the_tables_own_is_a_wait(self, driver: Driver) -> None:
        """Under a table whose approvals wait in `needs_review` (kind `waiting`), the run
        waits there, and the result says it waits: by the table's kinds, not by names."""
        store = MemoryEventStore(options=StoreOptions(reducer=Reducer(reviewed_table())))
        paused = driver.run(store, "r1", REFUNDING, prompt="refund O-1")
        assert (paused.status, paused.waiting, paused.pending_approvals) == (
            "needs_review",
            True,
            (R1_REFUND,),
        )

    def test_a_batch_mixing_free_and_approval_calls_runs_the_free_one_then_waits(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """The SDK runs get_weather at once and pauses for refund: a legal log, then a resume."""
        require(driver, "mixed_batch")
        store = MemoryEventStore()
        spec = agent(
            "refunds",
            batch(
                call("refund", "call_r1", order_id="O-1"),
                call("get_weather", "call_w1", city="Paris"),
            ),
            say("Refunded; sunny in Paris."),
        )
        paused = driver.run(store, "r1", spec, prompt="refund O-1, and the weather?")
        assert_free_call_ran_then_paused(paused, store)
        approve(store, "r1", "call_r1", approver="alice")
        resumed = agent("refunds", say("Refunded; sunny in Paris."))
        done = driver.drive(store, "r1", resumed, paused.state)
        assert_refunded_after_approval(done, store, tmp_path)

    def test_a_cancel_while_a_call_waits_for_approval_ends_the_run_cancelled(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """The SDK runs the free call (which asks to cancel), then would pause: cancelled
        instead, the call waiting for approval never run."""
        require(driver, "mixed_batch")
        store = MemoryEventStore()

        def hang_up() -> str:
            """Stop the run from elsewhere."""
            cancel(store, "r1", reason="the customer left")
            return "bye"

        spec = agent(
            "support",
            batch(call("refund", "call_r1", order_id="O-1"), call("hang_up", "call_h1")),
            tools=(REFUND, Tool("hang_up", hang_up)),
        )
        done = driver.run(store, "r1", spec, prompt="refund O-1")
        assert (done.status, done.record.cancel_reason) == ("cancelled", "the customer left")
        refund = done.record.actions["call_r1"]
        assert (refund.status, refund.reason) == ("rejected", "the run ended before it ran")
        assert done.record.actions["call_h1"].result == "bye"
        assert validates(store, "r1", tmp_path) == 0

    def test_an_sdk_move_the_table_refuses_raises_naming_the_signal(self, driver: Driver) -> None:
        """A lifecycle without human approvals: the SDK's pause for approval is refused, naming
        the SDK signal behind it; the call never runs."""
        store = no_approvals_store()
        with pytest.raises(IllegalTransitionError) as err:
            driver.run(store, "r1", REFUNDING, prompt="refund O-1")
        assert err.value.signal == driver.approval_signal  # type: ignore[attr-defined]
        assert str(err.value).startswith(
            "run 'r1' is 'running': event 'approval.requested' (sequence 4) is not allowed; "
        )
        assert CALLS == []

    def test_a_run_whose_sdk_move_the_table_refuses_is_failed(self, driver: Driver) -> None:
        """The refused pause for approval leaves the run failed (`illegal_transition`)."""
        store = no_approvals_store()
        with pytest.raises(IllegalTransitionError):
            driver.run(store, "r1", REFUNDING, prompt="refund O-1")
        record = store.load("r1")
        assert (record.status, record.error and record.error.kind) == (
            "failed",
            "illegal_transition",
        )


class TestKeptState:
    """The SDK state our store keeps for a paused run is checked before anything runs."""

    def test_a_state_whose_call_changed_after_approval_fails_closed(self, driver: Driver) -> None:
        """Approved for O-1, but the SDK state now says O-2: ApprovalMismatchError, nothing
        runs, the run still waits to be resumed."""
        require(driver, "kept_state")
        store = MemoryEventStore()
        paused = pause_for_refund(driver, store)
        approve(store, "r1", "call_r1", approver="alice")
        text = driver.state_text(paused)
        tampered = text.replace("O-1", "O-2")
        assert tampered != text
        with pytest.raises(ApprovalMismatchError) as err:
            driver.drive(store, "r1", RESUMED, driver.state_from_text(tampered))
        assert err.value.action_id == "call_r1"
        assert err.value.expected == store.load("r1").actions["call_r1"].arguments_digest
        assert err.value.expected != err.value.actual
        assert CALLS == []
        assert store.load("r1").status == "running"

    def test_a_kept_state_the_run_moved_on_from_is_refused(self, driver: Driver) -> None:
        """A state saved at the pause, put back after the resume ran: stale, SavedStateError;
        resuming the ended run returns it and runs nothing."""
        require(driver, "kept_state")
        assert driver.state_name is not None
        store = MemoryEventStore()
        pause_for_refund(driver, store)
        kept = store.attachment("r1", driver.state_name)
        assert kept is not None
        approve(store, "r1", "call_r1", approver="alice")
        assert driver.drive(store, "r1", RESUMED).status == "completed"
        store.put_attachment("r1", kept.name, kept.data, version=kept.version)
        CALLS.clear()
        with pytest.raises(SavedStateError) as err:
            _recorder(driver, store).saved_state(kept.name)
        assert str(err.value) == (
            f"run 'r1': cannot resume from the saved state '{driver.state_name}': it was saved "
            f"at version {kept.version}, but the run went on since ('tool.requested' at "
            f"sequence {kept.version + 2}): it is stale"
        )
        # Resuming the ended run returns it and runs nothing (an adapter may drop the stale
        # state as it does).
        assert driver.drive(store, "r1", RESUMED).status == "completed"
        assert CALLS == []

    def test_a_corrupt_kept_state_is_refused_saying_so(self, driver: Driver) -> None:
        """Bytes that are not the SDK's state: SavedStateError naming the parse error; nothing
        runs."""
        require(driver, "kept_state")
        assert driver.state_name is not None
        store = MemoryEventStore()
        pause_for_refund(driver, store)
        kept = store.attachment("r1", driver.state_name)
        assert kept is not None
        corrupt, reason = driver.corrupt_state
        store.put_attachment("r1", kept.name, corrupt, version=kept.version)
        approve(store, "r1", "call_r1", approver="alice")
        with pytest.raises(SavedStateError) as err:
            driver.drive(store, "r1", RESUMED)
        assert err.value.reason.startswith(reason)
        assert CALLS == []

    def test_driving_a_run_that_never_paused_here_says_no_state_is_kept(
        self, driver: Driver
    ) -> None:
        """A waiting run whose kept state is gone, and none given: SavedStateError naming the
        attachment; nothing runs."""
        require(driver, "kept_state")
        assert driver.state_name is not None
        store = MemoryEventStore()
        pause_for_refund(driver, store)
        assert store.delete_attachment("r1", driver.state_name)
        CALLS.clear()
        with pytest.raises(SavedStateError) as err:
            driver.drive(store, "r1", RESUMED)
        assert (err.value.run_id, err.value.name) == ("r1", driver.state_name)
        assert err.value.reason == (
            "none is kept (the run never paused for approval here); pass the state to drive"
        )
        assert CALLS == []


def _recorder(driver: Driver, store: MemoryEventStore) -> Any:
    """The adapter's recorder of run `r1`, to read its kept state as a resume would."""
    if driver.name == "openai-agents":
        from agentfsm.adapters.openai_agents import AgentsRun

        return AgentsRun(store, "r1").recorder
    from agentfsm.adapters.pydantic_ai import AgentIterRun

    return AgentIterRun(store, "r1").recorder


def manager(*, resumed: bool = False) -> AgentSpec:
    """A manager whose tool `refunds` asks a refunds subagent, whose refund needs approval.

    `resumed`: as a new process rebuilds them, with only the answers after the refund left.
    """
    child_steps = () if resumed else (call("refund", "call_r1", order_id="O-1"),)
    child = agent("refunds", *child_steps, say("O-1 refunded."))
    steps = () if resumed else (call("refunds", "call_m1", question="refund O-1"),)
    return agent(
        "manager", *steps, say("The refund is done."), tools=(), subagents=(Sub("refunds", child),)
    )


#: The refund of O-1 as run m1's subagent waits for it, whoever drives the runs.
M1_CHILDS_REFUND = refund_waiting_in("m1/call_m1")


def runner_manager() -> Agent:
    """`manager()` for our own Runner: call_m1 asks the refunds subagent, whose refund waits."""
    script = ScriptedModel(
        [
            Decision.call_tools(
                ProposedCall("refunds", {"task": "refund O-1"}, action_id="call_m1")
            ),
            Decision.answer("The refund is done."),
        ]
    )
    return Agent("manager", script, [subagent("refunds", runner_refunds())])


def manager_paused(driver: Driver, store: EventStore) -> None:
    """Run m1: its subagent asks for the refund, and both runs wait."""
    paused = driver.run(store, "m1", manager(), prompt="refund O-1")
    assert_caller_waits_on_child(paused, store, CALLS)


def researching(*child_steps: Step, answer: str) -> AgentSpec:
    """A triage agent whose tool `researcher` asks a weather subagent playing `child_steps`."""
    researcher = Sub("researcher", agent("weather", *child_steps))
    return agent(
        "triage",
        call("researcher", "call_s1", question="Paris and Rome?"),
        say(answer),
        tools=(),
        subagents=(researcher,),
    )


class TestSubagents:
    """A tool that asks another agent: the child is its own run, tied to its caller's."""

    @pytest.fixture(autouse=True)
    def _can_delegate(self, driver: Driver) -> None:
        require(driver, "subagents")

    def test_a_subagent_draws_on_the_parents_budget(self, driver: Driver, tmp_path: Path) -> None:
        """Once the tree overspends, both are stopped (budget). 15 tokens a model call, 40 for
        the tree: the parent's call and two of the child's spend 45, so the child's second
        model call overruns it (stopped right after), then the parent's next is refused."""
        store = MemoryEventStore()
        spec = researching(
            call("get_weather", "c1", city="Paris"),
            call("get_weather", "c2", city="Rome"),
            say("never reached"),
            answer="never reached either",
        )
        done = driver.run(store, "r1", spec, limits=Limits(max_tokens=40))
        assert_tree_stopped(done, store, "r1/call_s1", tmp_path)
        assert store.load("r1/call_s1").actions["c1"].result == "sunny in Paris"
        assert done.record.actions["call_s1"].result == (
            "the subagent 'weather' stopped (terminated, budget): sunny in Paris"
        )
        spent = 15 + driver.refused_call_tokens  # the SDK's figure, if it sent the call
        assert done.record.usage.input_tokens + done.record.usage.output_tokens == spent
        assert types(store, "r1/call_s1") == [
            "run.started", "model.started", "model.completed", "tool.requested", "tool.started",
            "tool.completed", "model.started", "model.completed", "run.terminated",
        ]  # fmt: skip
        assert types(store, "r1") == [
            "run.started", "model.started", "model.completed", "tool.requested", "tool.started",
            "tool.completed", "run.terminated",
        ]  # fmt: skip

    def test_a_subagent_of_a_run_without_money_limits_runs_to_its_answer(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """No token or cost limits on the parent: the child runs on its own terms; its answer
        is the tool's result."""
        store = MemoryEventStore()
        done = driver.run(store, "r1", researching(say("Sunny."), answer="It is sunny."))
        assert (done.status, done.final_output) == ("completed", "It is sunny.")
        assert store.load("r1/call_s1").final_output == "Sunny."
        assert done.record.actions["call_s1"].result == "Sunny."
        assert types(store, "r1") == [
            "run.started", "model.started", "model.completed", "tool.requested", "tool.started",
            "tool.completed", "model.started", "model.completed", "run.completed",
        ]  # fmt: skip
        assert types(store, "r1/call_s1") == [
            "run.started", "model.started", "model.completed", "run.completed",
        ]  # fmt: skip
        assert validates(store, "r1", tmp_path) == 0
        assert validates(store, "r1/call_s1", tmp_path) == 0

    @pytest.mark.parametrize("decision", ["approve", "reject"])
    def test_a_subagent_waiting_for_approval_pauses_its_parent_until_a_new_process_drives_it(
        self, driver: Driver, tmp_path: Path, decision: str
    ) -> None:
        """The child's call is decided in the child's run; resuming the parent in a new process
        goes on with both."""
        db = tmp_path / "runs.db"
        store = SQLiteEventStore(db)
        manager_paused(driver, store)
        ran = decide_for_child(store, decision)
        out = resume_in_new_process(driver, tmp_path, db, "m1", manager(resumed=True), None)
        assert_caller_and_child_finished(out, store, ran, "O-1 refunded.", tmp_path)
        if driver.state_name is not None:
            assert store.attachment("m1", driver.state_name) is None

    def test_a_parent_lists_its_subagents_call_as_the_runner_does(self, driver: Driver) -> None:
        """A parent waiting on its subagent names the subagent's call, in the subagent's
        run, exactly as our Runner's result does for the same tree."""
        paused = driver.run(MemoryEventStore(), "m1", manager(), prompt="refund O-1")
        ours = runner_paused("m1", runner_manager())
        assert paused.pending_approvals == ours.pending_approvals == (M1_CHILDS_REFUND,)
        assert (
            (paused.status, paused.waiting)
            == (ours.status, ours.waiting)
            == (
                "waiting_tool",
                False,
            )
        )

    def test_driving_a_parent_whose_subagent_is_undecided_leaves_both_waiting(
        self, driver: Driver
    ) -> None:
        """No decision yet: the resume runs nothing and names the subagent's call again."""
        store = MemoryEventStore()
        manager_paused(driver, store)
        again = driver.drive(store, "m1", manager(resumed=True))
        assert (again.status, again.pending_approvals) == ("waiting_tool", (M1_CHILDS_REFUND,))
        assert store.load("m1/call_m1").status == "waiting_approval"
        assert CALLS == []

    def test_cancelling_a_parent_waiting_on_its_subagent_cancels_both_on_drive(
        self, driver: Driver, tmp_path: Path
    ) -> None:
        """The subagent's pending call never runs; the parent's call to it is outcome unknown."""
        store = MemoryEventStore()
        manager_paused(driver, store)
        cancel(store, "m1", reason="the customer left")
        done = driver.drive(store, "m1", manager(resumed=True))
        assert (done.status, done.pending_approvals) == ("cancelled", ())
        assert done.record.actions["call_m1"].status == "unknown"
        child = store.load("m1/call_m1")
        assert (child.status, child.cancel_reason) == (
            "cancelled",
            "the run 'm1' that called it was cancelled",
        )
        assert child.actions["call_r1"].status == "rejected"
        assert CALLS == []
        assert validates(store, "m1", tmp_path) == 0
        assert validates(store, "m1/call_m1", tmp_path) == 0

    def test_deciding_a_subagents_call_in_the_parents_run_says_where_it_waits(
        self, driver: Driver, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """approve("m1", child's call) is refused, the error naming the subagent run to use; the
        command line says so too; nothing is decided."""
        from agentfsm.cli import main as cli
        from agentfsm.errors import ActionError

        store = SQLiteEventStore(tmp_path / "runs.db")
        manager_paused(driver, store)
        with pytest.raises(ActionError) as caught:
            approve(store, "m1", "call_r1", approver="alice")
        assert any("subagent run 'm1/call_m1'" in note for note in caught.value.__notes__)
        assert cli(["approve", "--store", str(tmp_path / "runs.db"), "m1", "call_r1"]) == 1
        assert "decide it there" in capsys.readouterr().err
        assert store.load("m1/call_m1").pending_approvals == ("call_r1",)

    def test_areject_of_a_subagents_call_in_the_parents_run_says_where_it_waits(
        self, driver: Driver
    ) -> None:
        """The async twin names the subagent run too, through an async store."""
        import asyncio

        from agentfsm.errors import ActionError
        from agentfsm.runtime import areject
        from agentfsm.stores import ThreadedAsyncEventStore

        store = MemoryEventStore()
        manager_paused(driver, store)
        astore = ThreadedAsyncEventStore(store)
        with pytest.raises(ActionError) as caught:
            asyncio.run(areject(astore, "m1", "call_r1", approver="bob", reason="no"))
        assert any("subagent run 'm1/call_m1'" in note for note in caught.value.__notes__)
