"""Admitting a batch of proposed calls: the policy's allow, deny or ask, and validation.

Kept apart from the planner because it is the one place a person's say (an approval, its
expiry) and the agent's policy meet the record; the planner only asks when a batch has
proposed or approved calls.
"""

from __future__ import annotations

from datetime import datetime

from agentfsm.events import models as m
from agentfsm.events.models import parse_timestamp
from agentfsm.names import ActionStatus
from agentfsm.record import Action, RunRecord
from agentfsm.runtime._outcomes import error
from agentfsm.runtime._writer import Spec, approval_asked, declined, requested
from agentfsm.runtime.agent import Agent
from agentfsm.runtime.policy import POLICY_APPROVER
from agentfsm.runtime.tools import InvalidCall

__all__ = ["admit"]

A = ActionStatus


def admit(record: RunRecord, agent: Agent, batch: list[Action], now: datetime) -> tuple[Spec, ...]:
    """Policy and validation for the batch's proposed and approved calls.

    Approvals come first: a person sees the batch before any of it runs (the table
    would also take them beside running calls, as SDKs do). If any is asked for, the
    run waits and the rest stay proposed until the decisions are in. An approval that
    lapsed (`expires_at`) before its call ran is asked for again — unless the policy now
    denies the call — with the expiry the policy gives now.
    """
    ask: list[Spec] = []
    denied: list[Spec] = []
    run: list[Spec] = []
    for action in batch:
        lapsed = action.status == A.APPROVED and _lapsed(action, now)
        if action.status == A.PROPOSED or lapsed:
            checked = agent.tools.check(action.tool, action.arguments)
            if isinstance(checked, InvalidCall):
                run.extend(_invalid(action, checked))
                continue
            decision = agent.policy(action, record)
            if decision.kind == "allow" and not lapsed:
                run.append(_requested(action))
            elif decision.kind == "deny":
                reason = decision.reason or "denied by policy"
                denied += declined(
                    action.action_id, action.tool, action.arguments, POLICY_APPROVER, reason
                )
            else:
                expires = (
                    (now + decision.expires_in).isoformat()
                    if decision.expires_in is not None
                    else None
                )
                ask.append(_approval_requested(action, expires))
        elif action.status == A.APPROVED:
            checked = agent.tools.check(action.tool, action.arguments)
            if isinstance(checked, InvalidCall):
                run.extend(_invalid(action, checked))
                continue
            decision = agent.policy(action, record)
            if decision.kind == "deny":
                run.append(_requested(action))
                run.append(
                    _failed(
                        action,
                        "policy_denied",
                        f"approved, but the policy refused it before it ran: "
                        f"{decision.reason or 'denied by policy'}",
                    )
                )
            else:
                run.append(_requested(action))
    if ask:
        return (*ask, *denied)
    return (*denied, *run)


def _requested(action: Action) -> Spec:
    return requested(action.action_id, action.tool, action.arguments)


def _lapsed(action: Action, now: datetime) -> bool:
    """The action's approval expired before its call ran."""
    return action.expires_at is not None and now > parse_timestamp(action.expires_at)


def _approval_requested(action: Action, expires_at: str | None) -> Spec:
    return approval_asked(action.action_id, action.tool, action.arguments, expires_at)


def _failed(action: Action, kind: str, message: str, retryable: bool = False) -> Spec:
    return Spec(
        m.ToolFailed,
        {"action_id": action.action_id, "error": error(kind, message, retryable=retryable)},
    )


def _invalid(action: Action, why: InvalidCall) -> list[Spec]:
    return [_requested(action), _failed(action, why.kind, why.message)]
