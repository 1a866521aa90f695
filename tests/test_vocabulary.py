"""One vocabulary across the public API (issue 30, item 1).

Sync and async: the bare name is synchronous, an async function or method is the bare name
with an `a` prefix, and a class whose methods are coroutines is `Async`-prefixed and keeps the
sync class's names. "Resume" is the other half of `pause` (the `run.resumed` event); driving a
run on from its log is `drive`. Checked on the names a user reaches, the SDK adapters' run
classes and the job engine included.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterator
from typing import Any

import pytest

#: Modules whose public names a user calls (the adapters' need their extras: dev has them).
MODULES = (
    "agentfsm",
    "agentfsm.runtime",
    "agentfsm.runtime.control",
    "agentfsm.runtime.procrastinate",
    "agentfsm.adapters.jobs",
    "agentfsm.adapters.openai_agents",
    "agentfsm.adapters.pydantic_ai",
    "agentfsm.adapters.claude_agent_sdk",
    "agentfsm.adapters.langgraph",
)


def _public(module: Any) -> Iterator[tuple[str, Any]]:
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    for name in names:
        obj = getattr(module, name)
        if getattr(obj, "__module__", "").startswith("agentfsm"):
            yield name, obj


def _callables() -> Iterator[tuple[str, str, Any, bool]]:
    """(owner, name, callable, owner is an `Async*` class) for every public function and
    every public method of a public class."""
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for name, obj in _public(module):
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if not attr.startswith("_") and inspect.isfunction(member):
                        yield obj.__name__, attr, member, obj.__name__.startswith("Async")
            elif inspect.isfunction(obj):
                yield module_name, name, obj, False


def test_an_async_callable_outside_an_async_class_is_a_prefixed() -> None:
    """`arun`/`run`, `adrive`/`drive`, `aapprove`/`approve`: a coroutine's name is its sync
    twin's with an `a` in front (where the twin exists, it is sync); none ends in `_sync`."""
    wrong = []
    for owner, name, fn, is_async_class in _callables():
        if name.endswith("_sync"):
            wrong.append(f"{owner}.{name}: a `_sync` suffix")
        if is_async_class or not inspect.iscoroutinefunction(fn):
            continue
        if not name.startswith("a"):
            wrong.append(f"{owner}.{name}: a coroutine without the `a` prefix")
    for owner, name, fn, is_async_class in _callables():
        if is_async_class or inspect.iscoroutinefunction(fn):
            continue
        twin = [f for o, n, f, _ in _callables() if o == owner and n == "a" + name]
        if twin and not inspect.iscoroutinefunction(twin[0]):
            wrong.append(f"{owner}.a{name}: the `a` twin of a sync name is not a coroutine")
    assert wrong == []


@pytest.mark.parametrize(
    ("module", "cls"),
    [
        ("agentfsm.adapters.openai_agents", "AgentsRun"),
        ("agentfsm.adapters.pydantic_ai", "AgentIterRun"),
        ("agentfsm.adapters.claude_agent_sdk", "ClaudeRun"),
        ("agentfsm.adapters.langgraph", "GraphRun"),
    ],
)
def test_every_sdk_adapter_runs_and_drives_with_the_same_four_names(module: str, cls: str) -> None:
    """`run`/`drive` sync, `arun`/`adrive` async, on every adapter alike."""
    run_class = getattr(importlib.import_module(module), cls)
    kinds = {n: inspect.iscoroutinefunction(getattr(run_class, n)) for n in ("run", "drive")}
    kinds |= {n: inspect.iscoroutinefunction(getattr(run_class, n)) for n in ("arun", "adrive")}
    assert kinds == {"run": False, "drive": False, "arun": True, "adrive": True}
    assert not hasattr(run_class, "resume")


def test_resume_is_the_other_half_of_pause_and_drive_drives() -> None:
    """`resume` appends `run.resumed` and drives nothing; the Runners, the job engine's
    drivers and the adapters continue a run with `drive`; the old names are gone."""
    import agentfsm
    from agentfsm.adapters.jobs import AdapterJobs
    from agentfsm.runtime import AsyncRunner, Runner, control
    from agentfsm.runtime.procrastinate import RunDriver

    assert agentfsm.resume is control.resume
    for gone in ("unpause", "aunpause", "call", "resumable"):
        assert not hasattr(agentfsm.runtime, gone), gone
    for cls in (Runner, AsyncRunner, AdapterJobs, RunDriver):
        assert hasattr(cls, "drive"), cls
        assert not hasattr(cls, "resume"), cls
        assert "resume_paused" in inspect.signature(cls.drive).parameters, cls
    assert not hasattr(Runner, "start")
    assert not hasattr(AsyncRunner, "start")
