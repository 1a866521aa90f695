"""The transition table: validation at build time, lookups, derivation."""

from __future__ import annotations

import pytest

from agentfsm import (
    DEFAULT_TABLE,
    Condition,
    IllegalTransitionError,
    State,
    Transition,
    TransitionTable,
)
from agentfsm.errors import InvalidTableError
from agentfsm.events.vocabulary import BUILTIN_EVENTS
from agentfsm.names import StateKind

NON_TERMINAL = (
    "created",
    "running",
    "waiting_tool",
    "waiting_approval",
    "paused",
    "cancel_requested",
)


#: The made-up event types of these small tables.
TOY_EVENTS = BUILTIN_EVENTS.extend("go", "stop", "again")


def _simple(*transitions: Transition, states: tuple[State, ...] | None = None) -> TransitionTable:
    return TransitionTable(
        name="t",
        states=states or (State("a"), State("b"), State("end", terminal=True)),
        initial="a",
        transitions=transitions,
        event_types=TOY_EVENTS,
    )


class TestValidation:
    def test_every_problem_is_reported_at_once(self) -> None:
        """One InvalidTableError lists each problem in a sentence, in a stable order."""
        with pytest.raises(InvalidTableError) as info:
            TransitionTable(
                name="broken",
                states=(State("a"), State("b"), State("lost"), State("end", terminal=True)),
                initial="a",
                transitions=(
                    Transition("a", "go", "b"),
                    Transition("a", "go", "end"),
                    Transition("b", "go", "ghost"),
                    Transition("end", "again", "a"),
                ),
                event_types=TOY_EVENTS,
            )
        assert info.value.problems == (
            "edge b --go--> ghost: target 'ghost' is not declared",
            "edge end --again--> a leaves terminal state 'end'",
            "'a' on 'go' is nondeterministic: 2 edges without a condition (to 'b', 'end')",
            "state 'lost' is unreachable from the initial state 'a'",
            "state 'b' cannot reach any terminal state (a trap)",
            "state 'lost' cannot reach any terminal state (a trap)",
        )
        assert info.value.table == "broken"
        assert str(info.value).startswith("table 'broken' is invalid (6 problems):\n  - edge b")

    def test_an_invalid_table_is_also_a_value_error(self) -> None:
        """Definition errors can be caught as ValueError by code that knows nothing of us."""
        with pytest.raises(ValueError, match="initial state 'nowhere' is not declared"):
            TransitionTable(
                name="t", states=(State("end", terminal=True),), initial="nowhere", transitions=()
            )

    def test_an_unconditional_edge_must_come_last(self) -> None:
        """Edges after an unconditional one for the same pair could never fire."""
        cond = Condition("maybe", lambda ctx, ev: True)
        with pytest.raises(InvalidTableError) as info:
            _simple(
                Transition("a", "go", "b"),
                Transition("a", "go", "end", cond),
                Transition("b", "stop", "end"),
            )
        assert info.value.problems == (
            "'a' on 'go': the edge without a condition (to 'b') must come last, "
            "or the edges after it never fire",
        )

    def test_a_table_without_terminal_states_is_refused(self) -> None:
        """A run on such a table could never end."""
        with pytest.raises(InvalidTableError) as info:
            TransitionTable(name="t", states=(State("a"),), initial="a", transitions=())
        assert info.value.problems[0] == "no state is terminal: a run could never end"

    def test_an_event_type_the_table_does_not_declare_is_refused(self) -> None:
        """`check-table` used to say ok for an edge on `ticket.escalated`, and no log could
        ever reach it: an undeclared type is a build-time error, once per type."""
        with pytest.raises(InvalidTableError) as info:
            DEFAULT_TABLE.derive(
                add_states=[State("escalated", kind="waiting")],
                add=[
                    Transition("waiting_approval", "ticket.escalated", "escalated"),
                    Transition("escalated", "ticket.escalated", "escalated"),
                    Transition("escalated", "run.resumed", "running"),
                ],
            )
        assert info.value.problems == (
            "event type 'ticket.escalated' is not declared (edges waiting_approval --> "
            "escalated, escalated --> escalated): add it with "
            "event_types=BUILTIN_EVENTS.extend(...) or derive(add_events=[...])",
        )

    def test_duplicate_state_names_are_refused(self) -> None:
        """Two states with one name would make lookups ambiguous."""
        with pytest.raises(InvalidTableError) as info:
            _simple(
                Transition("a", "go", "end"),
                states=(State("a"), State("a"), State("end", terminal=True)),
            )
        assert info.value.problems == ("state 'a' is declared twice",)


class TestStep:
    def test_unconditional_edge(self) -> None:
        """A plain (state, event) pair maps straight to its target."""
        assert DEFAULT_TABLE.step("created", "run.started") == "running"

    def test_illegal_move_names_state_event_and_what_was_legal(self) -> None:
        """The error carries data and reads like a sentence a person can act on."""
        with pytest.raises(IllegalTransitionError) as info:
            DEFAULT_TABLE.step("paused", "model.started", run_id="run_9", sequence=4)
        err = info.value
        assert (err.state, err.event, err.run_id, err.sequence) == (
            "paused",
            "model.started",
            "run_9",
            4,
        )
        assert err.allowed == (
            "run.cancel_requested",
            "run.failed",
            "run.resumed",
            "run.terminated",
        )
        assert str(err) == (
            "run 'run_9' is 'paused': event 'model.started' (sequence 4) is not allowed; "
            "allowed: 'run.cancel_requested', 'run.failed', 'run.resumed', 'run.terminated'"
        )

    def test_terminal_states_say_so(self) -> None:
        """In a terminal state nothing is allowed, and the message says why."""
        with pytest.raises(IllegalTransitionError) as info:
            DEFAULT_TABLE.step("completed", "model.started", run_id="run_123", sequence=5)
        assert info.value.terminal
        assert str(info.value) == (
            "run 'run_123' is 'completed' (terminal): event 'model.started' (sequence 5) "
            "is not allowed; allowed: none"
        )

    def test_conditions_are_tried_in_declared_order(self) -> None:
        """The first condition that holds picks the target; none holding is illegal."""
        first = Condition("first", lambda ctx, ev: ctx == 1)
        second = Condition("second", lambda ctx, ev: ctx in (1, 2))
        table = _simple(
            Transition("a", "go", "b", first),
            Transition("a", "go", "end", second),
            Transition("b", "stop", "end"),
        )
        assert table.step("a", "go", 1) == "b"
        assert table.step("a", "go", 2) == "end"
        with pytest.raises(IllegalTransitionError) as info:
            table.step("a", "go", 3)
        assert info.value.failed_conditions == ("first", "second")
        assert "none of the conditions 'first', 'second' holds" in str(info.value)

    def test_unknown_state_is_illegal_not_a_key_error(self) -> None:
        """A state the table does not declare allows nothing."""
        with pytest.raises(IllegalTransitionError) as info:
            DEFAULT_TABLE.step("dreaming", "run.started")
        assert info.value.allowed == ()


class TestDefaultTable:
    def test_its_repr_is_a_summary_not_the_declaration(self) -> None:
        """A signature with the table as default stays readable; describe() has the rest."""
        assert repr(DEFAULT_TABLE) == "<TransitionTable 'agent_run': 10 states, 53 transitions>"

    def test_states_and_terminals(self) -> None:
        """The ten states of DESIGN.md, four of them terminal."""
        assert DEFAULT_TABLE.state_names == (
            *NON_TERMINAL,
            "completed",
            "failed",
            "cancelled",
            "terminated",
        )
        assert DEFAULT_TABLE.terminal_states == {"completed", "failed", "cancelled", "terminated"}
        assert DEFAULT_TABLE.initial == "created"

    @pytest.mark.parametrize("state", NON_TERMINAL)
    def test_every_non_terminal_state_can_be_cancelled_failed_or_terminated(
        self, state: str
    ) -> None:
        """Cancellation, failure and guard stops reach every live state."""
        assert DEFAULT_TABLE.step(state, "run.cancel_requested") == "cancel_requested"
        assert DEFAULT_TABLE.step(state, "run.failed") == "failed"
        assert DEFAULT_TABLE.step(state, "run.terminated") == "terminated"

    @pytest.mark.parametrize("state", ["completed", "failed", "cancelled", "terminated"])
    def test_terminal_states_allow_nothing(self, state: str) -> None:
        """Terminal states are absorbing."""
        assert DEFAULT_TABLE.allowed(state) == ()

    def test_completed_back_to_running_is_illegal(self) -> None:
        """Continuing a conversation is a new run."""
        assert "running" not in {
            t.target for t in DEFAULT_TABLE.transitions if t.source == "completed"
        }

    def test_conditional_pairs(self) -> None:
        """The guarded edges of DESIGN.md, each with its condition's name, in order."""
        pairs = {
            (t.source, t.event): [] for t in DEFAULT_TABLE.transitions if t.condition is not None
        }
        for t in DEFAULT_TABLE.transitions:
            if (t.source, t.event) in pairs:
                assert t.condition is not None
                pairs[(t.source, t.event)].append((t.condition.name, t.target))
        assert pairs[("waiting_tool", "tool.completed")] == [
            ("batch resolved", "running"),
            ("calls left", "waiting_tool"),
            ("only decisions left", "waiting_approval"),
        ]
        assert pairs[("waiting_tool", "approval.requested")] == [
            ("calls left", "waiting_tool"),
            ("no calls left", "waiting_approval"),
        ]
        assert pairs[("waiting_approval", "approval.accepted")] == [
            ("others still pending", "waiting_approval"),
            ("all decided", "running"),
        ]
        assert pairs[("running", "tool.started")] == [("retry", "waiting_tool")]
        assert pairs[("running", "run.completed")] == [
            ("final output recorded, nothing unresolved", "completed")
        ]
        assert pairs[("cancel_requested", "run.cancelled")] == [("nothing in flight", "cancelled")]


class TestDerive:
    def test_a_derived_table_adds_a_state_without_touching_the_library(self) -> None:
        """Users add `escalated` with its edges; the default table is unchanged."""
        derived = DEFAULT_TABLE.derive(
            name="with_escalation",
            add_states=[State("escalated", description="a human took over")],
            add=[
                Transition("waiting_approval", "run.paused", "escalated"),
                Transition("escalated", "run.resumed", "waiting_approval"),
                Transition("escalated", "run.failed", "failed"),
            ],
        )
        assert derived.step("waiting_approval", "run.paused") == "escalated"
        assert derived.allowed("escalated") == ("run.failed", "run.resumed")
        assert "escalated" not in DEFAULT_TABLE.state_names

    def test_derived_tables_are_validated_too(self) -> None:
        """A new state without a way out is refused like in any table."""
        with pytest.raises(InvalidTableError) as info:
            DEFAULT_TABLE.derive(
                add_states=[State("limbo")], add=[Transition("paused", "handoff", "limbo")]
            )
        assert info.value.problems == ("state 'limbo' cannot reach any terminal state (a trap)",)

    def test_removing_an_edge_that_does_not_exist_is_an_error(self) -> None:
        """A typo in a removal cannot pass silently."""
        with pytest.raises(InvalidTableError) as info:
            DEFAULT_TABLE.derive(remove=[("running", "run.pasued", "paused")])
        assert info.value.problems == (
            "cannot remove edge running --run.pasued--> paused: it does not exist",
        )

    def test_removing_a_state_removes_its_edges(self) -> None:
        """A team that never pauses runs drops the state and everything touching it."""
        derived = DEFAULT_TABLE.derive(remove_states=["paused"])
        assert "paused" not in derived.state_names
        assert "run.paused" not in derived.allowed("running")
        assert all("paused" not in (t.source, t.target) for t in derived.transitions)


def test_the_quick_constructor_builds_the_same_error() -> None:
    """The reducer's fast path gives an error indistinguishable from the constructor's."""
    slow = IllegalTransitionError(
        run_id="r", sequence=3, state="paused", event="x", allowed=("a", "b"),
        terminal=False, failed_conditions=("c",),
    )  # fmt: skip
    quick = IllegalTransitionError.quick("r", 3, "paused", "x", ("a", "b"), False, ("c",))
    assert (str(quick), vars(quick), quick.args) == (str(slow), vars(slow), slow.args)


class TestStateKinds:
    """What a run in each state is doing is declared, so code decides by kind, not by name."""

    def test_the_default_table_declares_its_kinds(self) -> None:
        """Waiting for a person, paused, in flight, terminal: each built-in state says so."""
        assert {s.name: s.kind.value for s in DEFAULT_TABLE.states} == {
            "created": "active",
            "running": "active",
            "waiting_tool": "in_flight",
            "waiting_approval": "waiting",
            "paused": "paused",
            "cancel_requested": "in_flight",
            "completed": "terminal",
            "failed": "terminal",
            "cancelled": "terminal",
            "terminated": "terminal",
        }
        assert DEFAULT_TABLE.states_of("waiting", "paused") == ("waiting_approval", "paused")

    def test_a_derived_state_declares_its_own_kind(self) -> None:
        """An `escalated` state where a person owns the ticket is a waiting state."""
        table = DEFAULT_TABLE.derive(
            name="ticket",
            add_states=[State("escalated", kind="waiting", description="a person owns it")],
            add=[
                Transition("waiting_approval", "approval.rejected", "escalated"),
                Transition("escalated", "run.resumed", "running"),
                Transition("escalated", "run.cancel_requested", "cancel_requested"),
            ],
        )
        assert table.kind("escalated") == StateKind.WAITING
        assert table.states_of(StateKind.WAITING) == ("waiting_approval", "escalated")

    def test_terminal_and_kind_agree(self) -> None:
        """A state is terminal exactly when its kind is terminal; saying otherwise is an error."""
        assert State("done", terminal=True).kind == StateKind.TERMINAL
        with pytest.raises(ValueError, match="kind 'waiting' with terminal=True") as info:
            State("done", terminal=True, kind="waiting")
        assert str(info.value) == (
            "state 'done': kind 'waiting' with terminal=True; a state is terminal exactly "
            "when its kind is 'terminal'"
        )
        with pytest.raises(ValueError, match="'sleeping' is not a valid StateKind"):
            State("x", kind="sleeping")

    def test_an_unknown_state_has_no_kind(self) -> None:
        """Asking for the kind of a state the table lacks names the table."""
        with pytest.raises(KeyError, match="table 'agent_run' declares no state 'nope'"):
            DEFAULT_TABLE.kind("nope")

    def test_kinds_travel_with_the_spec(self) -> None:
        """A table's JSON description keeps kinds, and reads back with them."""
        from agentfsm.fsm.check import table_from_spec

        _, states, _, _, _ = table_from_spec(DEFAULT_TABLE.describe())
        assert [s.kind for s in states] == [s.kind for s in DEFAULT_TABLE.states]
