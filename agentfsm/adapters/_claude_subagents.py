"""Subagents of a `ClaudeRun`: each call of a subagent tool is a child run of its own.

A run given `subagents={"refunds": Subagent(...)}` offers the model one in-process SDK MCP
tool per subagent, `mcp__subagents__<name>(prompt)`. Our `PreToolUse` hook records the call
as started and drives the subagent there, as a `ClaudeRun` of its own (`<run_id>/<call id>`,
its own SDK session, sharing the run's token and cost limits): the CLI waits for the hook.
When the child ends, the tool returns what the calling model reads (its answer, or a line
saying how a guard stopped it); when it waits for approval, the hook defers the caller's
call, so the caller's leg ends waiting on it, and a resume (in any process) resumes the
child first, then replays the caller's call, which returns the child's answer.

Why not the CLI's own `Agent` tool: its subagents run inside the CLI, where a call deferred
for approval ends the subagent and the caller goes on (seen with the bundled CLI 2.1.x):
an approval there could not pause the caller. The adapter refuses such a call instead of
letting it run unapproved (see `Signals.pre_tool_use`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

from claude_agent_sdk import (
    AgentDefinition,
    ClaudeAgentOptions,
    SdkMcpTool,
    Transport,
    create_sdk_mcp_server,
)
from claude_agent_sdk.types import McpSdkServerConfig

from agentfsm.adapters._claude_signals import NeedsApproval
from agentfsm.adapters._storable import jsonable

__all__ = ["SERVER", "Answers", "Subagent", "child_options", "objective", "server"]

#: The in-process MCP server offering the subagent tools: `mcp__subagents__<name>`.
SERVER = "subagents"
#: How long the CLI waits for our `PreToolUse` hook, which drives a subagent to its end.
HOOK_TIMEOUT = 24 * 3600.0


@dataclass(frozen=True)
class Subagent:
    """A subagent a `ClaudeRun` may ask: the tool `mcp__subagents__<name>`.

    Args:
        description: what the calling model reads about the tool.
        agent: the child's `ClaudeAgentOptions`, or an `AgentDefinition` (its `prompt` the
            system prompt, its `tools`, `model` and `maxTurns` over the caller's options).
        name: the agent's name in our log and in a stopped child's line (default: the
            tool's name).
        needs_approval: the child's calls that wait for a person (default: the caller's).
        transport: the child's transport, as `ClaudeRun.run` takes it (default: the CLI).
    """

    description: str
    agent: AgentDefinition | ClaudeAgentOptions
    name: str | None = None
    needs_approval: Collection[str] | NeedsApproval | None = None
    transport: Transport | Callable[[ClaudeAgentOptions], Transport] | None = None


def tool_name(name: str) -> str:
    """The name the SDK reports a subagent tool's calls under."""
    return f"mcp__{SERVER}__{name}"


def objective(arguments: dict[str, Any]) -> str:
    """The child's prompt: the call's `prompt`, else its arguments as JSON."""
    prompt = arguments.get("prompt")
    return prompt if isinstance(prompt, str) else json.dumps(arguments, sort_keys=True)


def child_options(spec: Subagent, caller: ClaudeAgentOptions) -> ClaudeAgentOptions:
    """The child's options: its own, or its `AgentDefinition` over the caller's options."""
    agent = spec.agent
    if isinstance(agent, ClaudeAgentOptions):
        return agent
    model = agent.model if agent.model not in (None, "inherit") else caller.model
    servers = caller.mcp_servers
    if isinstance(servers, dict):
        servers = {k: v for k, v in servers.items() if k != SERVER}
    return replace(
        caller,
        system_prompt=agent.prompt,
        tools=agent.tools if agent.tools is not None else caller.tools,
        disallowed_tools=agent.disallowedTools or caller.disallowed_tools,
        model=model,
        max_turns=agent.maxTurns if agent.maxTurns is not None else caller.max_turns,
        mcp_servers=servers,
        agents=None,
        resume=None,
    )


class Answers:
    """What each subagent call's tool returns, put by the hook that drove the child."""

    def __init__(self) -> None:
        self._ready: dict[tuple[str, str], list[str]] = {}

    @staticmethod
    def _key(name: str, arguments: Any) -> tuple[str, str]:
        return name, json.dumps(jsonable(arguments), sort_keys=True)

    def put(self, name: str, arguments: Any, text: str) -> None:
        """Keep `text` for the next call of subagent `name` with `arguments`."""
        self._ready.setdefault(self._key(name, arguments), []).append(text)

    def take(self, name: str, arguments: Any) -> str | None:
        """The text kept for this call (None: no child was driven for it)."""
        texts = self._ready.get(self._key(name, arguments))
        return texts.pop(0) if texts else None


def server(subagents: dict[str, Subagent], answers: Answers) -> McpSdkServerConfig:
    """The SDK MCP server offering one tool per subagent, returning the child's answer."""

    def handler(name: str) -> Callable[[dict[str, Any]], Any]:
        async def answer(arguments: dict[str, Any]) -> dict[str, Any]:
            text = answers.take(name, arguments)
            if text is None:  # the hook refused it, or another hook ran it: nothing to say
                text = f"the subagent '{name}' was not run for this call"
                return {"content": [{"type": "text", "text": text}], "is_error": True}
            return {"content": [{"type": "text", "text": text}]}

        return answer

    schema = {
        "type": "object",
        "properties": {"prompt": {"type": "string", "description": "The task to delegate."}},
        "required": ["prompt"],
    }
    tools = [
        SdkMcpTool(name, spec.description, schema, handler(name))
        for name, spec in subagents.items()
    ]
    return create_sdk_mcp_server(SERVER, tools=tools)
