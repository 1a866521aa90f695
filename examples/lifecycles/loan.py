"""A loan application whose agent moves its own run: it asks for documents with a tool, makes
an offer with a decision, and people answer (or time does).

    from examples.lifecycles.loan import LOAN_TABLE, loan_agent

    running --loan.documents_requested--> documents_requested   (a tool's call causes it)
    documents_requested --loan.documents_received--> running    (the applicant sends them)
    documents_requested --loan.documents_expired--> declined    after 7 d (nothing came)
    running --loan.offer_made--> offer_made                     (the model's decision)
    running --loan.refused--> declined                          (the model's decision)
    offer_made --loan.offer_accepted--> approved                (the applicant signs)
    offer_made --loan.offer_expired--> declined                 after 3 d (no signature)

Everything else is the default agent table's (turns, calls, approvals, pause, cancel, fail,
terminate); both waiting states can be cancelled, failed or terminated like every state of
the default table. `loan_table(offer_wait=...)` is the same lifecycle with the offer open
another time: `DEMO_LOAN_TABLE` keeps it open one second, so `make demo` sees it expire.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Literal

from pydantic import Field

from agentfsm import DEFAULT_TABLE, State, Transition, TransitionTable
from agentfsm.events import CustomEvent
from agentfsm.names import RunStatus, StateKind
from agentfsm.runtime import (
    Agent,
    Decision,
    Emit,
    ModelContext,
    ProposedCall,
    ScriptedModel,
    Tool,
    ToolContext,
)

__all__ = [
    "DEMO_LOAN_TABLE",
    "DOCUMENTS_WAIT",
    "LOAN_TABLE",
    "OFFER_WAIT",
    "DocumentsExpired",
    "DocumentsReceived",
    "DocumentsRequested",
    "LoanRefused",
    "OfferAccepted",
    "OfferExpired",
    "OfferMade",
    "loan_agent",
    "loan_table",
    "loan_tools",
]


class DocumentsRequested(CustomEvent):
    """The agent asks the applicant for documents; the run waits for them."""

    type: Literal["loan.documents_requested"] = "loan.documents_requested"
    #: What the applicant is to send (an ID and a payslip unless the agent says otherwise).
    documents: list[str] = Field(default_factory=lambda: ["id", "payslip"], min_length=1)

    def fold(self, custom: Mapping[str, Any]) -> Mapping[str, Any]:
        """What the applicant was asked for."""
        return {**custom, "requested": self.documents}


class DocumentsReceived(CustomEvent):
    """The applicant's documents arrived (a person, or the upload service, appends it)."""

    type: Literal["loan.documents_received"] = "loan.documents_received"
    #: The ids of the documents that came (none: the upload service does not itemise them).
    document_ids: list[str] = Field(default_factory=list)

    def fold(self, custom: Mapping[str, Any]) -> Mapping[str, Any]:
        """Every document received so far, in the order they came."""
        return {**custom, "received": [*custom.get("received", ()), *self.document_ids]}


class DocumentsExpired(CustomEvent):
    """No documents came in time (the runtime appends it when the wait is over)."""

    type: Literal["loan.documents_expired"] = "loan.documents_expired"

    def fold(self, custom: Mapping[str, Any]) -> Mapping[str, Any]:
        """Why the application was declined."""
        return {**custom, "declined_because": "no documents in time"}


class OfferMade(CustomEvent):
    """The agent offers a loan; the applicant has a while to sign."""

    type: Literal["loan.offer_made"] = "loan.offer_made"
    amount: int = Field(ge=0)
    rate: float = Field(ge=0, lt=1)

    def fold(self, custom: Mapping[str, Any]) -> Mapping[str, Any]:
        """The offer on the table."""
        return {**custom, "offer": {"amount": self.amount, "rate": self.rate}}


class LoanRefused(CustomEvent):
    """The agent declines the application, saying why."""

    type: Literal["loan.refused"] = "loan.refused"
    reason: str

    def fold(self, custom: Mapping[str, Any]) -> Mapping[str, Any]:
        """Why the application was declined."""
        return {**custom, "declined_because": self.reason}


class OfferAccepted(CustomEvent):
    """The applicant signed the offer."""

    type: Literal["loan.offer_accepted"] = "loan.offer_accepted"

    def fold(self, custom: Mapping[str, Any]) -> Mapping[str, Any]:
        """The loan is granted for the offer's amount."""
        return {**custom, "granted": custom.get("offer", {}).get("amount")}


class OfferExpired(CustomEvent):
    """The applicant did not sign in time (the runtime appends it when the wait is over)."""

    type: Literal["loan.offer_expired"] = "loan.offer_expired"

    def fold(self, custom: Mapping[str, Any]) -> Mapping[str, Any]:
        """Why the application was declined."""
        return {**custom, "declined_because": "the offer was not signed in time"}


#: How long an application waits for its documents before it is declined.
DOCUMENTS_WAIT = timedelta(days=7)
#: How long an offer stays open.
OFFER_WAIT = timedelta(days=3)

_WAITING = ("documents_requested", "offer_made")


def loan_table(*, offer_wait: timedelta = OFFER_WAIT) -> TransitionTable:
    """The loan lifecycle, its offer open for `offer_wait`."""
    return DEFAULT_TABLE.derive(
        name="loan_application",
        add_states=[
            State(
                "documents_requested",
                kind=StateKind.WAITING,
                description="the applicant is asked for documents",
            ),
            State("offer_made", kind=StateKind.WAITING, description="the applicant may sign"),
            State("approved", terminal=True, description="the loan is granted"),
            State("declined", terminal=True, description="the loan is refused"),
        ],
        add_events=[
            DocumentsRequested,
            DocumentsReceived,
            DocumentsExpired,
            OfferMade,
            LoanRefused,
            OfferAccepted,
            OfferExpired,
        ],
        add=[
            Transition(RunStatus.RUNNING, "loan.documents_requested", "documents_requested"),
            Transition("documents_requested", "loan.documents_received", RunStatus.RUNNING),
            Transition(
                "documents_requested", "loan.documents_expired", "declined", after=DOCUMENTS_WAIT
            ),
            Transition(RunStatus.RUNNING, "loan.offer_made", "offer_made"),
            Transition(RunStatus.RUNNING, "loan.refused", "declined"),
            Transition("offer_made", "loan.offer_accepted", "approved"),
            Transition("offer_made", "loan.offer_expired", "declined", after=offer_wait),
            *(
                Transition(state, event, target)
                for state in _WAITING
                for event, target in (
                    ("run.cancel_requested", RunStatus.CANCEL_REQUESTED),
                    ("run.failed", RunStatus.FAILED),
                    ("run.terminated", RunStatus.TERMINATED),
                )
            ),
        ],
    )


#: The loan lifecycle.
LOAN_TABLE = loan_table()
#: The same lifecycle with the offer open one second: what `make demo` drives, to see it expire.
DEMO_LOAN_TABLE = loan_table(offer_wait=timedelta(seconds=1))


def check_credit(ctx: ToolContext) -> dict[str, Any]:
    """A lookup: the applicant's credit score (a made-up bureau)."""
    return {"applicant": ctx.args["applicant"], "score": 712}


def request_documents(ctx: ToolContext) -> Emit:
    """Ask the applicant for the documents the model names: the run waits for them."""
    return Emit("loan.documents_requested", documents=list(ctx.args["documents"]))


def loan_tools() -> list[Tool]:
    """`check_credit` (a lookup) and `request_documents` (declares the event it causes)."""
    return [
        Tool("check_credit", check_credit, side_effects=False),
        Tool(
            "request_documents",
            request_documents,
            idempotent=True,
            emits=("loan.documents_requested",),
        ),
    ]


def _offer(ctx: ModelContext) -> Decision:
    """With the documents in, offer the amount asked for to a good score; refuse the rest."""
    score = ctx.record.facts["check_credit"]["score"]
    if score < 600:
        return Decision.emit(Emit("loan.refused", reason=f"credit score {score}"))
    return Decision.emit(Emit("loan.offer_made", amount=25_000, rate=0.061))


def loan_agent() -> Agent:
    """The loan agent (a scripted model, by turn so a resumed run gets the right step): check
    the credit and ask for documents; once they are in, make an offer."""
    model = ScriptedModel(
        [
            Decision.call_tools(
                ProposedCall("check_credit", {"applicant": "A-7"}),
                ProposedCall("request_documents", {"documents": ["payslip", "id"]}),
            ),
            _offer,
        ],
        by_turn=True,
    )
    return Agent("loan_officer", model, loan_tools())
