"""The public surface: everything exported resolves, is documented, and nothing private leaks."""

from __future__ import annotations

import importlib

import pytest

import agentfsm

SUBPACKAGES = ["agentfsm.fsm", "agentfsm.events", "agentfsm.reducers"]


def test_all_is_sorted_and_unique() -> None:
    """A deliberate surface: one sorted `__all__`, constants first."""
    names = list(agentfsm.__all__)
    assert len(names) == len(set(names))
    assert names == sorted(names, key=lambda n: (not n.isupper(), n))


@pytest.mark.parametrize("module", ["agentfsm", *SUBPACKAGES])
def test_every_exported_name_resolves_and_is_public(module: str) -> None:
    """Each name in `__all__` exists, and none starts with an underscore."""
    mod = importlib.import_module(module)
    for name in mod.__all__:
        assert not name.startswith("_"), name
        assert hasattr(mod, name), f"{module}.{name} does not resolve"


def test_every_exported_callable_has_a_one_line_summary() -> None:
    """Google-style docstrings: a summary line on every public class and function."""
    for name in agentfsm.__all__:
        obj = getattr(agentfsm, name)
        if callable(obj) and not isinstance(obj, type(agentfsm.Event)):
            doc = (obj.__doc__ or "").strip()
            assert doc, f"{name} has no docstring"
            assert doc.splitlines()[0].endswith("."), f"{name}: summary line must be a sentence"


def test_the_package_is_typed() -> None:
    """`py.typed` ships, so type checkers use our annotations."""
    from importlib.resources import files

    assert files("agentfsm").joinpath("py.typed").is_file()


def test_importing_has_no_global_side_effects() -> None:
    """Importing agentfsm configures no logging and changes no warning filters."""
    import subprocess
    import sys

    probe = (
        "import logging, warnings, structlog\n"
        "before = (list(warnings.filters), logging.root.handlers[:], structlog.is_configured())\n"
        "import agentfsm\n"
        "after = (list(warnings.filters), logging.root.handlers[:], structlog.is_configured())\n"
        "assert before == after, (before, after)\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True)
