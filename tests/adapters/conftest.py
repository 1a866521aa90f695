"""Adapter tests run fully offline: any network connection attempt fails the test."""

from __future__ import annotations

import os
import socket
import sys

import pytest

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
os.environ.setdefault("LANGSMITH_TRACING", "false")


class NetworkAttemptError(RuntimeError):
    """A test tried to open a network connection."""


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace socket connects with a function that raises, so nothing can reach a server."""

    def refuse(self: socket.socket, address: object) -> None:
        raise NetworkAttemptError(f"network access attempted: {address!r}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


#: The scripted apps' logs of the tools their agents ran (`CALLS`).
_APPS = (
    "tests.adapters._openai_agents_app",
    "tests.adapters._langgraph_app",
    "tests.adapters._pydantic_ai_app",
    "tests.adapters._drivers",
)


@pytest.fixture(autouse=True)
def fresh_calls() -> None:
    """Each test starts with empty tool-call logs in the apps imported so far."""
    for name in _APPS:
        module = sys.modules.get(name)
        if module is not None:
            module.CALLS.clear()
