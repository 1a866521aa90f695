"""The real `claude` CLI's agent of the contract tests: options, tools, and a resume process.

`options(api, config_dir)` points the SDK's bundled CLI at the fake Messages API on
127.0.0.1 (an isolated config dir, no settings files, no built-in tools, nonessential traffic
off, and a dead proxy for anything that is not loopback), with one in-process SDK MCP server
`shop`: `refund` (logged in `CALLS_FILE`) and `slow` (sleeps; cancelled by an interrupt).

Run as `python -m tests.adapters._claude_app DB RUN_ID API CONFIG_DIR LOG` it resumes run
RUN_ID of the SQLite store DB in this new process and prints the outcome as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool

#: Where the tools log what ran (a file: the CLI may call them in another process).
CALLS_FILE = "AGENTFSM_CLAUDE_CALLS"


def _log(line: str) -> None:
    path = os.environ.get(CALLS_FILE)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


@tool("refund", "Refund an order", {"order_id": str})
async def refund(args: dict[str, Any]) -> dict[str, Any]:
    """Refund an order (needs approval)."""
    _log(f"refund {args['order_id']}")
    return {"content": [{"type": "text", "text": f"refunded {args['order_id']}"}]}


@tool("slow", "Look something up slowly", {"seconds": float})
async def slow(args: dict[str, Any]) -> dict[str, Any]:
    """Sleep; an interrupt cancels it."""
    _log("slow started")
    try:
        await asyncio.sleep(args["seconds"])
    except asyncio.CancelledError:
        _log("slow cancelled")
        raise
    return {"content": [{"type": "text", "text": "slow done"}]}


def options(api: str, config_dir: Path) -> ClaudeAgentOptions:
    """The SDK's options for the bundled CLI against the fake API at `api`."""
    env = {
        "ANTHROPIC_BASE_URL": api,
        "ANTHROPIC_API_KEY": "sk-test-not-a-key",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CONFIG_DIR": str(config_dir),
        # Anything that is not loopback goes to a proxy that is not there: it fails.
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "NO_PROXY": "127.0.0.1,localhost",
    }
    config_dir.mkdir(parents=True, exist_ok=True)
    shop = create_sdk_mcp_server("shop", tools=[refund, slow])
    return ClaudeAgentOptions(
        mcp_servers={"shop": shop},
        tools=[],
        setting_sources=[],
        env=env,
        cwd=str(config_dir),
    )


def _main(db: str, run_id: str, api: str, config_dir: str, calls: str) -> None:
    os.environ[CALLS_FILE] = calls
    from structlog.testing import capture_logs

    from agentfsm.adapters.claude_agent_sdk import ClaudeRun
    from agentfsm.stores import SQLiteEventStore

    run = ClaudeRun(SQLiteEventStore(db), run_id, needs_approval={"mcp__shop__refund"})
    with capture_logs():
        done = run.drive(options(api, Path(config_dir)))
    cost = done.sdk_result.total_cost_usd if done.sdk_result is not None else None
    print(json.dumps({"status": done.status, "final_output": done.final_output,
                      "total_cost_usd": cost}))  # fmt: skip


if __name__ == "__main__":
    _main(*sys.argv[1:6])
