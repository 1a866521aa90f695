"""The Runner: drives model, tool and policy callables through the table, durably.

`Runner` (sync) and `AsyncRunner` (asyncio) persist every step through an event store before
acting on it, pause for approvals and resume the exact approved call, cancel in two phases,
retry only what is safe to repeat, and continue any run from the store after a crash.
`control` steers runs from other processes; `Worker` shares runs among processes by lease.
"""

from agentfsm.runtime.agent import (
    Agent,
    ModelFn,
    RunnerConfig,
    RunOutcome,
    RunResult,
    Subagent,
    SubagentArgs,
    exponential_backoff,
    subagent,
)
from agentfsm.runtime.async_runner import AsyncRunner
from agentfsm.runtime.control import (
    aapprove,
    acancel,
    apause,
    approve,
    areject,
    asubmit,
    aunpause,
    cancel,
    pause,
    reject,
    submit,
    unpause,
)
from agentfsm.runtime.errors import LeaseLostError, RunSupersededError, UnknownAgentError
from agentfsm.runtime.model import (
    Decision,
    HandoffDelta,
    IncompleteStreamError,
    ModelChunk,
    ModelContext,
    ModelError,
    ProposedCall,
    StreamAssembler,
    TextDelta,
    ToolCallDelta,
    UsageDelta,
    call,
)
from agentfsm.runtime.policy import (
    ALLOW,
    POLICY_APPROVER,
    Policy,
    PolicyDecision,
    ToolPolicy,
    allow_all,
    deny,
    needs_approval,
)
from agentfsm.runtime.recovery import RUNNABLE, InFlight, in_flight, resumable, unknown_outcomes
from agentfsm.runtime.runner import Runner, utc_now
from agentfsm.runtime.scripted import ScriptedModel
from agentfsm.runtime.tools import (
    InvalidCall,
    OutcomeUnknownError,
    Tool,
    ToolContext,
    ToolError,
    ToolRegistry,
    ToolResult,
)
from agentfsm.runtime.worker import AsyncWorker, Worker
from agentfsm.runtime.writer import BudgetTree

__all__ = [
    "ALLOW",
    "POLICY_APPROVER",
    "RUNNABLE",
    "Agent",
    "AsyncRunner",
    "AsyncWorker",
    "BudgetTree",
    "Decision",
    "HandoffDelta",
    "InFlight",
    "IncompleteStreamError",
    "InvalidCall",
    "LeaseLostError",
    "ModelChunk",
    "ModelContext",
    "ModelError",
    "ModelFn",
    "OutcomeUnknownError",
    "Policy",
    "PolicyDecision",
    "ProposedCall",
    "RunOutcome",
    "RunResult",
    "RunSupersededError",
    "Runner",
    "RunnerConfig",
    "ScriptedModel",
    "StreamAssembler",
    "Subagent",
    "SubagentArgs",
    "TextDelta",
    "Tool",
    "ToolCallDelta",
    "ToolContext",
    "ToolError",
    "ToolPolicy",
    "ToolRegistry",
    "ToolResult",
    "UnknownAgentError",
    "UsageDelta",
    "Worker",
    "aapprove",
    "acancel",
    "allow_all",
    "apause",
    "approve",
    "areject",
    "asubmit",
    "aunpause",
    "call",
    "cancel",
    "deny",
    "exponential_backoff",
    "in_flight",
    "needs_approval",
    "pause",
    "reject",
    "resumable",
    "subagent",
    "submit",
    "unknown_outcomes",
    "unpause",
    "utc_now",
]
