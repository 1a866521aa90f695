"""Record the real `claude` CLI's frames for `claude_frames.json` (re-run on an SDK upgrade).

    python -m tests.adapters.record_claude_frames

drives `ClaudeRun` over the SDK's bundled CLI against the fake Messages API (loopback only):
a call that needs approval is deferred, approved, and the session resumed, alone and beside
a free call in the same answer (`SCENARIOS`); each leg's frames,
both ways, are written in their normalized shape (`shape`), which `test_claude_frames`
checks the scripted CLI's frames against.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

FRAMES = Path(__file__).with_name("claude_frames.json")

#: Frames the scripted CLI leaves out on purpose: the session-state and status reports (an
#: older CLI's subset, which the SDK ends on the `result` frame), and kinds the SDK's parser
#: skips (`attachment`, `command_lifecycle`); the SDK MCP handshake is left out in `shape`.
IGNORED = {"system session_state_changed", "system status", "attachment", "command_lifecycle"}


#: The recorded scenarios, by their legs' prefix: one call needing approval; and an answer
#: asking for it and a free call in one batch (`[refund O-1, look-up]`, the CLI runs the
#: look-up and keeps the refund deferred).
SCENARIOS = {"": "refund O-1", "batch ": "batch rf"}


def shape(direction: str, frame: dict[str, Any]) -> str | None:
    """A frame as the check compares it: who sent it, its kind, and its keys (None: ignored)."""
    kind = str(frame.get("type"))
    if kind == "stream_event":
        kind += " " + str(frame["event"].get("type"))
    elif kind == "system":
        kind += " " + str(frame.get("subtype"))
    elif kind == "control_request":
        request = frame["request"]
        kind += " " + str(request.get("subtype"))
        if request.get("subtype") == "hook_callback":
            kind += " " + str(request["input"].get("hook_event_name"))
        if request.get("subtype") in ("mcp_message", "initialize"):
            return None
    elif kind == "control_response":
        return None  # answers: their requests say what was asked
    elif kind == "result":
        kind += " " + str(frame.get("stop_reason"))
    elif kind == "user" and direction == "sdk":
        return None  # the prompt
    if kind in IGNORED:
        return None
    return f"{direction} {kind}"


def record() -> dict[str, list[str]]:
    """Run the approval scenario over the real CLI; each leg's frame shapes."""
    from claude_agent_sdk._internal.transport.subprocess_cli import SubprocessCLITransport
    from claude_agent_sdk.types import _configure_can_use_tool
    from structlog.testing import capture_logs

    from agentfsm.adapters.claude_agent_sdk import ClaudeRun
    from agentfsm.runtime import approve
    from agentfsm.stores import MemoryEventStore
    from tests.adapters._claude_app import options
    from tests.adapters._fake_anthropic import FakeAnthropic
    from tests.adapters.test_claude_cli import REFUND, script

    legs: dict[str, list[str]] = {}

    class Recording(SubprocessCLITransport):
        def __init__(self, leg: str, opts: Any) -> None:
            super().__init__(prompt=None, options=_configure_can_use_tool(opts))
            self.leg = legs.setdefault(leg, [])

        async def write(self, data: str) -> None:
            self._keep("sdk", json.loads(data))
            await super().write(data)

        async def read_messages(self) -> Any:
            async for frame in super().read_messages():
                self._keep("cli", frame)
                yield frame

        def _keep(self, direction: str, frame: dict[str, Any]) -> None:
            kept = shape(direction, frame)
            if kept is not None:
                self.leg.append(kept)

    for prefix, prompt in SCENARIOS.items():
        store = MemoryEventStore()
        with FakeAnthropic(script) as api, tempfile.TemporaryDirectory() as tmp, capture_logs():
            opts = options(api.url, Path(tmp))
            run = ClaudeRun(store, "r1", needs_approval={REFUND})
            leg = lambda name, p=prefix: lambda o: Recording(p + name, o)  # noqa: E731
            asyncio.run(run.arun(prompt, opts, transport=leg("run")))
            approve(store, "r1", "toolu_r1", approver="alice")
            run = ClaudeRun(store, "r1", needs_approval={REFUND})
            done = asyncio.run(run.adrive(opts, transport=leg("resume")))
            assert done.status == "completed", done.status
    return legs


if __name__ == "__main__":
    import claude_agent_sdk

    legs = record()
    bundled = Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude.version"
    data = {
        "sdk": claude_agent_sdk.__version__,
        "cli": bundled.read_text(encoding="utf-8").strip() if bundled.exists() else None,
        "legs": legs,
    }
    FRAMES.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(f"wrote {FRAMES} ({sum(map(len, legs.values()))} frames)\n")
