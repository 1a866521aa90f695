"""The in-process SDK MCP servers' tools, called as the `claude` CLI calls them.

Split from `claude_transport` because it is a protocol inside the protocol: a tool named
`mcp__<server>__<tool>` of an SDK server (`create_sdk_mcp_server`) runs in the SDK's
process, so the CLI speaks JSON-RPC to it (`initialize` once per server, then `tools/call`),
each message carried by an `mcp_message` control request. `ScriptedCLI` only asks whether
a name is such a tool and calls it; the JSON-RPC is here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from claude_agent_sdk import ClaudeAgentOptions

__all__ = ["SdkServers"]

#: Send a control request to the SDK; its answer.
Ask = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]


class SdkServers:
    """The SDK MCP servers of `options`, reached through `ask`.

    Args:
        options: the options the SDK's client was built with (`mcp_servers` is read).
        ask: sends a control request to the SDK and returns its answer.
        ids: the JSON-RPC ids (the CLI's one counter, shared with its message ids).
    """

    def __init__(self, options: ClaudeAgentOptions, ask: Ask, ids: Iterator[int]) -> None:
        self.options = options
        self._ask = ask
        self._ids = ids
        self._ready: set[str] = set()

    def tool_of(self, name: str) -> tuple[str, str] | None:
        """(server, tool) of an in-process SDK MCP server's tool `mcp__<server>__<tool>`."""
        if not name.startswith("mcp__"):
            return None
        server, _, tool = name[len("mcp__") :].partition("__")
        servers = self.options.mcp_servers
        config = servers.get(server) if isinstance(servers, dict) else None
        if not tool or not isinstance(config, dict) or config.get("type") != "sdk":
            return None
        return server, tool

    async def call(self, server: str, tool: str, arguments: dict[str, Any]) -> Any:
        """Call an SDK MCP server's tool as the CLI does (initializing the server first)."""
        if server not in self._ready:
            await self._rpc(
                server,
                "initialize",
                {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "claude-code", "version": "scripted"},
                },
            )
            await self._rpc(server, "notifications/initialized", None)
            self._ready.add(server)
        result = await self._rpc(server, "tools/call", {"name": tool, "arguments": arguments})
        content = (result or {}).get("content") or []
        if (result or {}).get("isError"):
            raise ValueError("".join(str(b.get("text", "")) for b in content))
        return content

    async def _rpc(self, server: str, method: str, params: dict[str, Any] | None) -> Any:
        """One JSON-RPC message to an SDK MCP server, through the SDK; its `result`."""
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        if not method.startswith("notifications/"):
            message["id"] = next(self._ids)
        got = await self._ask({"subtype": "mcp_message", "server_name": server, "message": message})
        response = got.get("mcp_response") or {}
        if "error" in response:
            raise ValueError(str(response["error"].get("message")))
        return response.get("result")
