"""The scripted CLI plays the frames the real CLI sent, in the same order (the recording).

`claude_frames.json` holds the real `claude` CLI's frames of an approval deferred, approved
and resumed, alone and beside a free call of the same answer (`record_claude_frames.py` re-records it, e.g. after an SDK upgrade). The same
scenario over `ScriptedCLI` must send and receive the same frames, normalized the same way:
so the fast tests drive the SDK the way the real CLI does.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk")

from claude_agent_sdk import ClaudeAgentOptions
from structlog.testing import capture_logs

from agentfsm.adapters.claude_agent_sdk import ClaudeRun
from agentfsm.runtime import approve
from agentfsm.stores import MemoryEventStore
from agentfsm.testing.fixtures.claude_transport import Answer, ScriptedCLI, Use
from tests.adapters.record_claude_frames import FRAMES, SCENARIOS, shape

REFUND = "mcp__shop__refund"


#: The recorded scenarios' first answers (`SCENARIOS`, by their legs' prefix).
FIRST = {
    "": (Use("toolu_r1", REFUND, {"order_id": "O-1"}),),
    "batch ": (
        Use("toolu_r1", REFUND, {"order_id": "O-1"}),
        Use("toolu_f1", "mcp__shop__slow", {"seconds": 0.0}),
    ),
}


def scripted_legs(tmp_path: Path) -> dict[str, list[str]]:
    """The recorded scenarios over the scripted CLI: each leg's frame shapes."""
    tools = {
        REFUND: lambda order_id: f"refunded {order_id}",
        "mcp__shop__slow": lambda seconds: "slow done",
    }
    clis: dict[str, ScriptedCLI] = {}
    for prefix, prompt in SCENARIOS.items():
        steps = [Answer(uses=FIRST[prefix]), Answer("Refunded.")]

        def cli(leg: str, steps: list[Answer] = steps) -> Any:
            def build(options: ClaudeAgentOptions) -> ScriptedCLI:
                clis[leg] = ScriptedCLI(options, steps, tools, tmp_path)
                return clis[leg]

            return build

        store = MemoryEventStore()
        with capture_logs():
            run = ClaudeRun(store, "r1", needs_approval={REFUND})
            asyncio.run(run.arun(prompt, ClaudeAgentOptions(), transport=cli(prefix + "run")))
            approve(store, "r1", "toolu_r1", approver="alice")
            run = ClaudeRun(store, "r1", needs_approval={REFUND})
            resume = cli(prefix + "resume")
            done = asyncio.run(run.adrive(ClaudeAgentOptions(), transport=resume))
        assert done.status == "completed"
    return {
        leg: [s for d, f in c.frames if (s := shape(d, f)) is not None] for leg, c in clis.items()
    }


def test_the_scripted_cli_sends_the_frames_the_real_cli_sent(tmp_path: Path) -> None:
    """Deferred, approved, resumed: the same frames in the same order as the recording."""
    recorded = json.loads(FRAMES.read_text(encoding="utf-8"))
    assert scripted_legs(tmp_path) == recorded["legs"]


def test_the_recording_names_the_sdk_and_cli_it_was_made_with() -> None:
    """Re-record when the SDK is upgraded past the recording's version."""
    import claude_agent_sdk

    recorded = json.loads(FRAMES.read_text(encoding="utf-8"))
    assert recorded["sdk"] == claude_agent_sdk.__version__, (
        "the SDK was upgraded: run `python -m tests.adapters.record_claude_frames`"
    )
