"""A support-ticket agent's lifecycle: the default table plus `escalated`, where a person owns
the ticket, reached by an event type of this lifecycle, `ticket.escalated`.

    from examples.lifecycles.ticket import TICKET_TABLE

The agent escalates a call the approver rejects as "needs a human"; the person who takes it
hands it back with `ticket.handed_back` (the run goes on) or closes it for good. Every run
records who it was escalated to (`record.custom["escalated_to"]`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from agentfsm import DEFAULT_TABLE, Condition, State, Transition
from agentfsm.events import CustomEvent
from agentfsm.names import RunStatus, StateKind

__all__ = ["TICKET_TABLE", "TicketEscalated", "TicketHandedBack"]


class TicketEscalated(CustomEvent):
    """A person takes the ticket over; the agent waits for it to be handed back."""

    type: Literal["ticket.escalated"] = "ticket.escalated"
    escalated_to: str
    priority: Literal["normal", "urgent"] = "normal"

    def fold(self, custom: Mapping[str, Any]) -> Mapping[str, Any]:
        """Who holds the ticket, and how urgent it is."""
        return {**custom, "escalated_to": self.escalated_to, "priority": self.priority}


class TicketHandedBack(CustomEvent):
    """The person hands the ticket back to the agent, with a note for it."""

    type: Literal["ticket.handed_back"] = "ticket.handed_back"
    note: str = ""

    def fold(self, custom: Mapping[str, Any]) -> Mapping[str, Any]:
        """The person no longer holds it; their note stays for the agent to read."""
        return {**{k: v for k, v in custom.items() if k != "escalated_to"}, "note": self.note}


def _urgent(record: Any, event: Any) -> bool:
    return getattr(event, "priority", None) == "urgent"


URGENT = Condition("urgent", _urgent, "the escalation is marked urgent")

#: The ticket lifecycle: the default agent table, plus escalation to a person.
TICKET_TABLE = DEFAULT_TABLE.derive(
    name="support_ticket",
    add_states=[
        State(
            "escalated",
            kind=StateKind.WAITING,
            description="a person owns the ticket; the agent waits for it back",
        ),
        State(
            "escalated_urgent",
            kind=StateKind.WAITING,
            description="as escalated, and a supervisor is paged",
        ),
    ],
    add_events=[TicketEscalated, TicketHandedBack],
    add=[
        # Only between steps, never with a call in flight.
        Transition(RunStatus.RUNNING, "ticket.escalated", "escalated_urgent", URGENT),
        Transition(RunStatus.RUNNING, "ticket.escalated", "escalated"),
        *(
            Transition(state, "ticket.handed_back", RunStatus.RUNNING)
            for state in ("escalated", "escalated_urgent")
        ),
        *(
            Transition(state, event, target)
            for state in ("escalated", "escalated_urgent")
            for event, target in (
                ("run.cancel_requested", RunStatus.CANCEL_REQUESTED),
                ("run.failed", RunStatus.FAILED),
                ("run.terminated", RunStatus.TERMINATED),
            )
        ),
    ],
)
