"""The SDK adapters' demo runs offline, ends as its docstring says, and exports a valid log."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from agentfsm.cli import main as cli

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo_adapters.py"


def test_each_sdk_run_ends_as_described_and_its_log_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """OpenAI completes after an approval (also one its subagent waited for), LangGraph after
    a handoff, pydantic-ai on budget, Claude after an approval and a resume."""
    spec = importlib.util.spec_from_file_location("demo_adapters", DEMO)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["demo_adapters"] = module
    spec.loader.exec_module(module)
    export = tmp_path / "sdk-runs.jsonl"
    with capture_logs():
        statuses = module.run_all(tmp_path, export)
    assert statuses == {
        "sdk-openai": "completed",
        "sdk-subagent": "completed",
        "sdk-langgraph": "completed",
        "sdk-pydantic-ai": "terminated",
        "sdk-claude": "completed",
    }
    out = capsys.readouterr().out
    assert "4  handoff                running -> running" in out
    assert "paused: waiting_approval, waiting for ['toolu_refund']" in out
    assert cli(["validate", "--quiet", str(export)]) == 0
