"""The adapter tests' network guard really refuses connections."""

from __future__ import annotations

import socket

import pytest

from tests.adapters.conftest import NetworkAttemptError


def test_a_connection_attempt_raises() -> None:
    """Connecting any socket raises NetworkAttemptError naming the address."""
    with socket.socket() as s, pytest.raises(NetworkAttemptError) as err:
        s.connect(("127.0.0.1", 9))
    assert str(err.value) == "network access attempted: ('127.0.0.1', 9)"
