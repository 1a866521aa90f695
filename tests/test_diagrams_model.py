"""The diagram model: what is merged, grouped, collapsed, and in which order."""

from __future__ import annotations

from agentfsm.diagrams import ANY_ACTIVE, DiagramModel, Edge, EdgeLabel, StateNode, diagram_model
from agentfsm.events.vocabulary import BUILTIN_EVENTS
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import State, Transition, TransitionTable
from agentfsm.names import StateKind
from tests._diagram_tables import TINY


def _edges(model: DiagramModel) -> list[tuple[str | None, str, list[str]]]:
    return [(e.source, e.target, [label.text for label in e.labels]) for e in model.edges]


class TestExtraction:
    def test_states_keep_declaration_order_and_flags(self) -> None:
        """States come in declaration order with initial/terminal flags and descriptions."""
        assert diagram_model(TINY).states == (
            StateNode("idle", True, False, "nothing to do"),
            StateNode("busy", False, False, ""),
            StateNode("done", False, True, "", StateKind.TERMINAL),
            StateNode("broken", False, True, "", StateKind.TERMINAL),
        )

    def test_edges_of_the_default_table(self) -> None:
        """Parallel moves merge per (source, target); events sharing a condition and place
        share a label; a state's edges come by their first transition, and alternatives are
        numbered in the order they are tried."""
        assert _edges(diagram_model(DEFAULT_TABLE)) == [
            ("created", "running", ["run.started"]),
            (
                "running",
                "running",
                [
                    "model.started {max_turns, deadline, budget}",
                    "model.completed {max_calls_per_decision}",
                    "handoff",
                ],
            ),
            ("running", "waiting_approval", ["approval.requested"]),
            (
                "running",
                "waiting_tool",
                [
                    "tool.requested {loop_detected}",
                    "tool.started [retry] {deadline, budget, max_attempts}",
                ],
            ),
            ("running", "paused", ["run.paused"]),
            ("running", "completed", ["run.completed [final output recorded, nothing unresolved]"]),
            (
                "waiting_tool",
                "waiting_tool",
                [
                    "approval.requested 1. [calls left]",
                    "approval.accepted / approval.rejected",
                    "tool.requested {loop_detected}",
                    "tool.started [first attempt or retry] {deadline, budget, max_attempts}",
                    "tool.completed / tool.failed / tool.outcome_unknown 2. [calls left]",
                ],
            ),
            (
                "waiting_tool",
                "waiting_approval",
                [
                    "approval.requested 2. [no calls left]",
                    "tool.completed / tool.failed / tool.outcome_unknown 3. [only decisions left]",
                ],
            ),
            (
                "waiting_tool",
                "running",
                ["tool.completed / tool.failed / tool.outcome_unknown 1. [batch resolved]"],
            ),
            (
                "waiting_approval",
                "waiting_approval",
                [
                    "approval.requested",
                    "approval.accepted / approval.rejected 1. [others still pending]",
                ],
            ),
            (
                "waiting_approval",
                "running",
                ["approval.accepted / approval.rejected 2. [all decided]"],
            ),
            ("paused", "running", ["run.resumed"]),
            (
                "cancel_requested",
                "cancel_requested",
                [
                    "tool.completed / tool.failed / tool.outcome_unknown",
                    "model.completed {max_calls_per_decision}",
                ],
            ),
            ("cancel_requested", "cancelled", ["run.cancelled [nothing in flight]"]),
            (None, "cancel_requested", ["run.cancel_requested"]),
            (None, "failed", ["run.failed"]),
            (None, "terminated", ["run.terminated"]),
        ]

    def test_collapse_false_draws_every_source(self) -> None:
        """Without collapsing, a family is one edge per active state and no pseudo-state."""
        model = diagram_model(TINY, collapse=False)
        assert (model.has_any_active, _edges(model)) == (
            False,
            [
                ("idle", "busy", ["job.start {budget}"]),
                ("idle", "broken", ["job.crash"]),
                ("busy", "busy", ["job.tick"]),
                ("busy", "done", ["job.end 1. [all good]"]),
                # The fallback of `job.end` is not `job.crash`'s kind of move: two lines.
                ("busy", "broken", ["job.end 2. else", "job.crash"]),
            ],
        )

    def test_a_family_missing_one_state_is_not_collapsed(self) -> None:
        """A move that leaves all active states but one is drawn state by state."""
        table = DEFAULT_TABLE.derive(remove=[("paused", "run.failed", "failed")])
        edges = _edges(diagram_model(table))
        assert (None, "failed", ["run.failed"]) not in edges
        assert ("running", "failed", ["run.failed"]) in edges
        assert [e for e in edges if e[1] == "failed" and e[0] == "paused"] == []

    def test_a_new_state_joining_every_family_keeps_the_collapse(self) -> None:
        """A derived active state with the cancel/fail/terminate moves stays under any-active."""
        table = DEFAULT_TABLE.derive(
            add_states=[State("escalated")],
            add_events=["escalate"],
            add=[
                Transition("waiting_approval", "escalate", "escalated"),
                Transition("escalated", "run.resumed", "running"),
                Transition("escalated", "run.cancel_requested", "cancel_requested"),
                Transition("escalated", "run.failed", "failed"),
                Transition("escalated", "run.terminated", "terminated"),
            ],
        )
        sources = [e.source for e in diagram_model(table).edges if e.target == "failed"]
        assert sources == [None]

    def test_one_active_state_is_never_collapsed(self) -> None:
        """With a single active state, `any active state` would only add a box."""
        table = TransitionTable(
            name="one",
            states=[State("a"), State("z", terminal=True)],
            initial="a",
            transitions=[Transition("a", "stop", "z")],
            event_types=BUILTIN_EVENTS.extend("stop"),
        )
        assert diagram_model(table).edges == (Edge("a", "z", (EdgeLabel(("stop",), None, ()),)),)

    def test_the_model_is_deterministic(self) -> None:
        """Two extractions of one table are equal, edge for edge."""
        assert diagram_model(DEFAULT_TABLE) == diagram_model(DEFAULT_TABLE)


class TestLabels:
    def test_label_text(self) -> None:
        """Events joined by ` / `, the condition in brackets, guards in braces."""
        label = EdgeLabel(("a.b", "c.d"), "ready", ("deadline", "budget"))
        assert label.text == "a.b / c.d [ready] {deadline, budget}"

    def test_moves_expand_a_merged_edge(self) -> None:
        """`Edge.moves` lists each (source, event, target, condition) the edge stands for."""
        edge = Edge(None, "z", (EdgeLabel(("x", "y"), "c", ()),))
        assert list(edge.moves()) == [(None, "x", "z", "c"), (None, "y", "z", "c")]

    def test_any_active_name(self) -> None:
        """The pseudo-state has one spelling across formats."""
        assert ANY_ACTIVE == "any active state"


class TestPublicSurface:
    def test_every_exported_name_resolves_and_none_is_private(self) -> None:
        """`agentfsm.diagrams.__all__` names real, public objects, each once."""
        import agentfsm.diagrams as pkg

        missing = [n for n in pkg.__all__ if not hasattr(pkg, n)]
        private = [n for n in pkg.__all__ if n.startswith("_")]
        assert (missing, private, len(set(pkg.__all__)) == len(pkg.__all__)) == ([], [], True)
