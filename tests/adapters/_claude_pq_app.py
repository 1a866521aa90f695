"""A Claude agent whose runs are Procrastinate jobs, and the two machines of the test.

Each "machine" is a process of its own with its own `CLAUDE_CONFIG_DIR` (and working
directory): only the PostgreSQL store is in common. The CLI is the scripted one
(`agentfsm.testing.fixtures.claude_transport`), which keeps its session where the real CLI keeps its
transcript under `CLAUDE_CONFIG_DIR`, so the adapter must carry it from one machine to the
other through the store.

- `python -m tests.adapters._claude_pq_app pause DSN CONFIG_DIR CALLS [API]`: run `c1`
  ("refund O-1") on this machine until it waits for approval of the refund;
- `python -m tests.adapters._claude_pq_app work DSN CONFIG_DIR CALLS [API]`: a worker of the
  engine on this machine, draining the queue (`AdapterJobs` resumes the Claude runs).

With `API` (a fake Messages API's URL) the CLI is the real bundled one, as the contract
tests run it (`tests.adapters._claude_app.options`), instead of the scripted one.

Each prints the run's status, usage and this machine's session files as JSON.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool
from structlog.testing import capture_logs

from agentfsm.adapters.claude_agent_sdk import ClaudeRun
from agentfsm.adapters.jobs import AdapterJobs
from agentfsm.runtime.procrastinate import EngineSettings, ProcrastinateEngine
from agentfsm.stores.base import EventStore
from agentfsm.testing.fixtures.claude_transport import Answer, Use, scripted_cli

REFUND = "mcp__shop__refund"
AGENT = "refunds"


def options(config: Path, calls: Path) -> ClaudeAgentOptions:
    """This machine's options: its config dir and working directory, the `shop` tools."""

    @tool("refund", "Refund an order", {"order_id": str})
    async def refund(args: dict[str, Any]) -> dict[str, Any]:
        with calls.open("a", encoding="utf-8") as f:
            f.write(f"refund {args['order_id']} on {config.name}\n")
        return {"content": [{"type": "text", "text": f"refunded {args['order_id']}"}]}

    config.mkdir(parents=True, exist_ok=True)
    return ClaudeAgentOptions(
        mcp_servers={"shop": create_sdk_mcp_server("shop", tools=[refund])},
        env={"CLAUDE_CONFIG_DIR": str(config)},
        cwd=str(config),
    )


def claude(store: EventStore, run_id: str) -> ClaudeRun:
    return ClaudeRun(store, run_id, needs_approval={REFUND})


def real_options(api: str, config: Path, calls: Path) -> ClaudeAgentOptions:
    """The contract tests' options for the real CLI against the fake API at `api`."""
    from tests.adapters import _claude_app

    os.environ[_claude_app.CALLS_FILE] = str(calls)
    return _claude_app.options(api, config)


def engine(dsn: str, config: Path, calls: Path, api: str | None = None) -> ProcrastinateEngine:
    """The engine as this machine builds it: Claude runs resumed with its own options."""

    def drive(store: EventStore, run_id: str) -> Any:
        if store.load(run_id).current_agent != AGENT:
            return None  # not a Claude run of ours
        if api is not None:
            return claude(store, run_id).adrive(real_options(api, config, calls))
        # The model's answer after the refund (the deferred call is replayed from the
        # session the adapter restores from the store).
        cli = scripted_cli([Answer("Refunded O-1.")])
        return claude(store, run_id).adrive(options(config, calls), transport=cli)

    settings = EngineSettings(heartbeat=0.3, stalled_after=1.5, poll=0.2, delete_jobs="never")
    return ProcrastinateEngine(dsn, lambda store: AdapterJobs(store, drive), settings=settings)


def sessions(config: Path) -> list[str]:
    """The session files under this machine's config dir."""
    return sorted(p.name for p in (config / "projects").glob("*/*.jsonl"))


def main(role: str, dsn: str, config_dir: str, calls_file: str, api: str | None = None) -> None:
    config, calls = Path(config_dir), Path(calls_file)
    jobs = engine(dsn, config, calls, api)
    with capture_logs(), jobs.store() as store:
        if role == "pause":
            use = Use("toolu_r1", REFUND, {"order_id": "O-1"})
            cli = None if api is not None else scripted_cli([Answer(uses=(use,))])
            opts = real_options(api, config, calls) if api is not None else options(config, calls)
            run = claude(store, "c1").arun("refund O-1", opts, agent=AGENT, transport=cli)
            done = asyncio.run(run)
        else:
            asyncio.run(jobs.aserve(wait=False, install_signal_handlers=False))
            done = None
        record = store.load("c1")
    print(json.dumps({
        "status": record.status,
        "final_output": record.final_output,
        "usage": record.usage.to_json(),
        "sessions": sessions(config),
        "pending": list(done.record.pending_approvals) if done is not None else [],
    }))  # fmt: skip


if __name__ == "__main__":
    main(*sys.argv[1:6])
