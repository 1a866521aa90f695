"""Policy: may this exact call run — `allow`, `deny`, or `needs_approval`?

The Runner asks the policy about every proposed call, with the run's record, before anything
runs, and asks again right before an *approved* call runs (the world may have changed since
the approval: an order shipped, a limit was lowered). On that second check a
`needs_approval` answer is satisfied by the approval already given; `deny` still stops it.

How the answers are recorded:

- `allow`: `tool.requested`, then the call runs;
- `needs_approval`: `approval.requested` (with `expires_at` if given), and the run waits in
  `waiting_approval` for `approve` / `reject`;
- `deny`: `approval.requested` at once followed by `approval.rejected` with
  `approver="policy"` and the reason — a policy is an automatic approver, and the ledger
  needs every proposed call resolved before the model is called again. The model sees the
  rejection and its reason as the call's result.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Literal

import attrs

if TYPE_CHECKING:
    from agentfsm.record import Action, RunRecord

__all__ = [
    "ALLOW",
    "POLICY_APPROVER",
    "Policy",
    "PolicyDecision",
    "ToolPolicy",
    "allow_all",
    "deny",
    "needs_approval",
]

#: The `approver` of an `approval.rejected` the policy decided.
POLICY_APPROVER = "policy"


@attrs.frozen
class PolicyDecision:
    """A policy's answer for one call.

    Attributes:
        kind: `allow`, `deny` or `needs_approval`.
        reason: why (shown to the model for a denial; kept on the approval request).
        expires_in: for `needs_approval`: how long the approval stays valid once asked.
    """

    kind: Literal["allow", "deny", "needs_approval"]
    reason: str | None = None
    expires_in: timedelta | None = None


#: Let the call run.
ALLOW = PolicyDecision("allow")


def deny(reason: str) -> PolicyDecision:
    """Refuse the call, saying why (the model sees the reason)."""
    return PolicyDecision("deny", reason)


def needs_approval(
    reason: str | None = None, *, expires_in: timedelta | None = None
) -> PolicyDecision:
    """Ask a person first; the approval is bound to this exact call and may expire."""
    return PolicyDecision("needs_approval", reason, expires_in)


#: A policy: called with the action (its `tool`, `arguments`, and `status` — `proposed`,
#: or `approved` on the re-check) and the run's record.
Policy = Callable[["Action", "RunRecord"], PolicyDecision]


def allow_all(action: Action, record: RunRecord) -> PolicyDecision:
    """The default policy: every call may run."""
    return ALLOW


@attrs.frozen
class ToolPolicy:
    """A policy by tool name: some tools need approval, some are denied, the rest allowed.

    Attributes:
        approval: tools that need a person's approval.
        denied: tool name -> the reason it is refused.
        expires_in: how long approvals stay valid (None: no expiry).
    """

    approval: Collection[str] = frozenset()
    denied: Mapping[str, str] = attrs.field(factory=dict)
    expires_in: timedelta | None = None

    def __call__(self, action: Action, record: RunRecord) -> PolicyDecision:
        """The decision for `action`'s tool."""
        if action.tool in self.denied:
            return deny(self.denied[action.tool])
        if action.tool in self.approval:
            return needs_approval(
                f"'{action.tool}' needs a person's approval", expires_in=self.expires_in
            )
        return ALLOW
