"""Adapter tests run fully offline: any network connection attempt fails the test."""

from __future__ import annotations

import os
import socket

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
