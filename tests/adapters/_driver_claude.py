"""The scenarios' driver for the Claude Agent SDK: `ClaudeSDKClient` over a scripted CLI.

The SDK's own client, query and callbacks run; `ScriptedCLI` plays the CLI (the public
`transport=` parameter), running the scenario's tools as the CLI runs its own tools, and
keeping its sessions in the workdir, so a new process resumes them as the CLI would. A
subagent (`Sub`) is a `Subagent` of the run (the tool `mcp__subagents__<tool>`, an SDK MCP
tool), its own scripted CLI playing the child's steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from claude_agent_sdk import ClaudeAgentOptions
from structlog.testing import capture_logs

from agentfsm.adapters.claude_agent_sdk import ClaudeRun, Subagent
from agentfsm.events import Limits
from agentfsm.stores.base import EventStore
from agentfsm.testing.fixtures.claude_transport import Answer, ScriptedCLI, Use
from tests.adapters._common import run as drive
from tests.adapters._drivers import AgentSpec, Say


class ClaudeDriver:
    """Builds the scripted CLI of a spec; the adapter drives the SDK's client over it."""

    name = "claude-agent-sdk"
    state_name = "claude-agent-sdk/session"
    failed_kind = "tool_error"
    #: The scripted CLI is a custom transport, with no gateway before it: a call a guard
    #: refused (at its answer's start) was sent, streamed, and is in the CLI's figures.
    refused_call_tokens = 15
    approval_signal = "claude-agent-sdk hook PreToolUse (call 'call_r1')"
    corrupt_state = (b"{not json", "it does not load: JSONDecodeError: Expecting property")
    cannot: ClassVar[Mapping[str, str]] = {}

    def __init__(self, workdir: Path) -> None:
        self.sessions = workdir / "claude-sessions"
        #: Each agent's scripted CLIs (one per leg), by the agent's name.
        self.clis: dict[str, list[ScriptedCLI]] = {}

    def transport(self, spec: AgentSpec) -> Any:
        """A function of the options giving the scripted CLI playing `spec`."""
        subs = {s.tool for s in spec.subagents}
        steps = [
            Answer(s.text) if isinstance(s, Say)
            else Answer(uses=tuple(self.use(c.call_id, c.tool, c.args, subs) for c in s))
            for s in spec.steps
        ]  # fmt: skip
        tools = {t.name: t.fn for t in spec.tools}
        legs = self.clis.setdefault(spec.name, [])

        def leg(options: ClaudeAgentOptions) -> ScriptedCLI:
            legs.append(ScriptedCLI(options, steps, tools, self.sessions))
            return legs[-1]

        return leg

    @staticmethod
    def use(call_id: str, tool: str, args: dict[str, Any], subagents: set[str]) -> Use:
        """The call as the model makes it: a subagent's as `mcp__subagents__<tool>(prompt)`."""
        if tool in subagents:
            return Use(call_id, f"mcp__subagents__{tool}", {"prompt": str(args["question"])})
        return Use(call_id, tool, args)

    def subagents(self, spec: AgentSpec) -> dict[str, Subagent]:
        """The spec's subagents, each played by its own scripted CLI."""
        return {
            s.tool: Subagent(
                f"Ask the agent '{s.agent.name}'.",
                ClaudeAgentOptions(),
                name=s.agent.name,
                needs_approval=self.approvals(s.agent),
                transport=self.transport(s.agent),
            )
            for s in spec.subagents
        }

    def claude_run(self, store: EventStore, run_id: str, spec: AgentSpec, **options: Any) -> Any:
        """The adapter's run of `spec`."""
        return ClaudeRun(store, run_id, needs_approval=self.approvals(spec),
                         subagents=self.subagents(spec), **options)  # fmt: skip

    @staticmethod
    def approvals(spec: AgentSpec) -> set[str]:
        """The names of the spec's tools that need approval."""
        return {t.name for t in spec.tools if t.needs_approval}

    def run(self, store: EventStore, run_id: str, spec: AgentSpec, *, prompt: str = "weather?",
            limits: Limits | None = None, **options: Any) -> Any:  # fmt: skip
        """`ClaudeRun.arun`."""
        run = self.claude_run(store, run_id, spec, **options)
        return drive(
            run.arun(prompt, ClaudeAgentOptions(), limits=limits, agent=spec.name,
                    transport=self.transport(spec))
        )  # fmt: skip

    def drive(self, store: EventStore, run_id: str, spec: AgentSpec, state: Any = None,
              **options: Any) -> Any:  # fmt: skip
        """`ClaudeRun.adrive`."""
        run = self.claude_run(store, run_id, spec, **options)
        return drive(run.adrive(ClaudeAgentOptions(), state, transport=self.transport(spec)))

    def run_without_loop(self, store: EventStore, run_id: str, spec: AgentSpec, prompt: str) -> Any:
        """`ClaudeRun.run` (sync)."""
        run = self.claude_run(store, run_id, spec)
        with capture_logs():
            return run.run(prompt, ClaudeAgentOptions(), transport=self.transport(spec))

    def drive_without_loop(self, store: EventStore, run_id: str, spec: AgentSpec) -> Any:
        """`ClaudeRun.drive` (sync)."""
        run = self.claude_run(store, run_id, spec)
        with capture_logs():
            return run.drive(ClaudeAgentOptions(), transport=self.transport(spec))

    def state_text(self, paused: Any) -> str:
        """The kept session JSON."""
        return str(paused.state)

    def state_from_text(self, text: str) -> Any:
        """The session JSON, as `adrive` takes it."""
        return text

    def seen(self, agent: str) -> dict[str, str]:
        """The tool results the agent's CLI sent the model (its `user` frames)."""
        return {
            block["tool_use_id"]: str(block["content"])
            for cli in self.clis[agent]
            for way, frame in cli.frames
            if way == "cli" and frame.get("type") == "user"
            for block in frame["message"]["content"]
            if isinstance(block, dict) and block.get("type") == "tool_result"
        }
