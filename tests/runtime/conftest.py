"""Fixtures for the runtime tests (the PostgreSQL server is in tests/conftest.py)."""
