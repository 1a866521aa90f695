"""The adapter tests' network guard really refuses connections."""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys

import pytest

from tests.adapters.conftest import NetworkAttemptError


def test_a_connection_attempt_raises() -> None:
    """Connecting any socket raises NetworkAttemptError naming the address."""
    with socket.socket() as s, pytest.raises(NetworkAttemptError) as err:
        s.connect(("127.0.0.1", 9))
    assert str(err.value) == "network access attempted: ('127.0.0.1', 9)"


@pytest.mark.parametrize(
    "module", ["agents", "langgraph", "pydantic_ai", "claude_agent_sdk", "opentelemetry.sdk"]
)
def test_under_ci_every_adapter_sdk_is_installed(module: str) -> None:
    """The adapter tests skip without their SDK; under CI=true a missing SDK fails instead."""
    if os.environ.get("CI") != "true":
        pytest.skip("only checked under CI=true (the dev extra installs every SDK)")
    importlib.import_module(module)


@pytest.mark.parametrize(
    ("adapter", "sdk"),
    [
        ("langgraph", "agents"),
        ("pydantic_ai", "agents"),
        ("pydantic_ai", "langgraph"),
        ("claude_agent_sdk", "agents"),
        ("claude_agent_sdk", "pydantic_ai"),
    ],
)
def test_an_adapter_does_not_import_another_adapters_sdk(adapter: str, sdk: str) -> None:
    """Each adapter needs only its own extra: importing it loads no other SDK."""
    pytest.importorskip(adapter)
    code = f"import sys, agentfsm.adapters.{adapter}; print({sdk!r} in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "False\n"
