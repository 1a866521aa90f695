"""One agent, spelled once, driven through any SDK adapter: what `test_scenarios` runs on.

A scenario writes its agent as a script of model steps (`say(text)`, `call(tool, id, **args)`,
a `batch` of calls; each step reports 10 input and 5 output tokens), the tools it may call
(`get_weather`, failing for "Atlantis"; `refund`, which needs approval; or a scenario's own
`Tool`), and its subagents (`Sub`: a tool that asks another scripted agent, as the adapter's
`agent_tool`/`delegate` does). A `Driver` builds that agent for its SDK, runs it under our
lifecycle, and resumes it, here or in a new process. A later adapter joins the suite by
adding a driver to `DRIVERS`.

Run as `python -m tests.adapters._drivers DRIVER WORKDIR DB RUN_ID STATE AGENT_JSON` it
resumes run RUN_ID of the SQLite store DB in this new process (STATE: a file holding the
SDK state the pause returned, or `-` for the one our store kept) and prints the outcome as
JSON.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest

from agentfsm.events import Limits
from agentfsm.stores.base import EventStore

ROOT = Path(__file__).resolve().parents[2]

#: The standard tools' log of what ran, in order (cleared before each test).
CALLS: list[str] = []


@dataclass(frozen=True)
class Call:
    """The model asks for `tool` with `args`, under the SDK call id `call_id`."""

    tool: str
    call_id: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Say:
    """The model answers `text` (a final answer)."""

    text: str


#: One model step: an answer, or a batch of tool calls.
Step = Say | tuple[Call, ...]


def say(text: str) -> Say:
    """A step answering `text`."""
    return Say(text)


def call(tool: str, call_id: str, **args: Any) -> tuple[Call, ...]:
    """A step asking for one tool call."""
    return (Call(tool, call_id, args),)


def batch(*steps: tuple[Call, ...]) -> tuple[Call, ...]:
    """A step asking for several tool calls at once."""
    return tuple(c for step in steps for c in step)


def get_weather(city: str) -> str:
    """Get the weather for a city."""
    CALLS.append(f"get_weather {city}")
    if city == "Atlantis":
        raise ValueError("no such city")
    return f"sunny in {city}"


def refund(order_id: str) -> str:
    """Refund an order."""
    CALLS.append(f"refund {order_id}")
    return f"refunded {order_id}"


@dataclass(frozen=True)
class Tool:
    """A tool the model may call: a plain typed function with a docstring."""

    name: str
    fn: Callable[..., Any]
    needs_approval: bool = False


WEATHER = Tool("get_weather", get_weather)
REFUND = Tool("refund", refund, needs_approval=True)
#: The tools a new process can rebuild by name.
STANDARD = {t.name: t for t in (WEATHER, REFUND)}


@dataclass(frozen=True)
class Sub:
    """A tool `tool(question)` that asks `agent` as a subagent of the call (its own run)."""

    tool: str
    agent: AgentSpec


@dataclass(frozen=True)
class AgentSpec:
    """A scripted agent: its name, model steps, tools and subagents."""

    name: str
    steps: tuple[Step, ...]
    tools: tuple[Tool, ...] = (WEATHER, REFUND)
    subagents: tuple[Sub, ...] = field(default=())

    def to_json(self) -> Any:
        """The spec as JSON (standard tools only: a new process rebuilds them by name)."""
        for t in self.tools:
            if STANDARD.get(t.name) is not t:
                raise ValueError(f"tool {t.name!r} cannot be rebuilt in a new process")
        steps = [
            {"say": s.text} if isinstance(s, Say) else [[c.tool, c.call_id, c.args] for c in s]
            for s in self.steps
        ]
        subs = [[s.tool, s.agent.to_json()] for s in self.subagents]
        return {"name": self.name, "steps": steps, "tools": [t.name for t in self.tools],
                "subagents": subs}  # fmt: skip

    @classmethod
    def from_json(cls, data: Any) -> AgentSpec:
        """The spec `to_json` wrote."""
        steps: list[Step] = [
            Say(s["say"]) if isinstance(s, dict) else tuple(Call(*c) for c in s)
            for s in data["steps"]
        ]
        return cls(
            data["name"],
            tuple(steps),
            tuple(STANDARD[name] for name in data["tools"]),
            tuple(Sub(tool, cls.from_json(a)) for tool, a in data["subagents"]),
        )


def agent(name: str, *steps: Step, tools: tuple[Tool, ...] = (WEATHER, REFUND),
          subagents: tuple[Sub, ...] = ()) -> AgentSpec:  # fmt: skip
    """An `AgentSpec` from its steps."""
    return AgentSpec(name, steps, tools, subagents)


class Driver(Protocol):
    """How the scenarios drive one SDK's adapter (each call builds the SDK's agent anew).

    `options` are the adapter run's own keywords, common to every adapter (`guards`,
    `reserve_tokens`, `clock`, `listeners`, `pricing`).
    """

    #: The SDK's name, as the test ids show it.
    name: str
    #: The attachment our store keeps the SDK's state of a paused run under (None: the SDK
    #: keeps it elsewhere, as LangGraph's checkpointer).
    state_name: str | None
    #: How the adapter records a `get_weather` that raised (the SDK hands it to the model).
    failed_kind: str
    #: The signal an illegal `approval.requested` is blamed on.
    approval_signal: str
    #: Bytes no kept state loads from, and how the refusal's reason starts.
    corrupt_state: tuple[bytes, str]
    #: Scenarios' features this SDK cannot express, each with why.
    cannot: Mapping[str, str]
    #: Tokens of a model call a guard refused that the SDK sent all the same and reports
    #: spent, so the record holds them (0: a refused call is never made).
    refused_call_tokens: int

    def run(self, store: EventStore, run_id: str, spec: AgentSpec, *, prompt: str = "weather?",
            limits: Limits | None = None, **options: Any) -> Any:  # fmt: skip
        """Start run `run_id` of `spec` and drive it to its end or pause (an `ObservedRun`)."""

    def drive(self, store: EventStore, run_id: str, spec: AgentSpec, state: Any = None,
              **options: Any) -> Any:  # fmt: skip
        """Drive run `run_id` on with `spec` as a new process builds it (only its steps left)."""

    def run_without_loop(self, store: EventStore, run_id: str, spec: AgentSpec, prompt: str) -> Any:
        """The adapter's sync `run`, from code without an event loop."""

    def drive_without_loop(self, store: EventStore, run_id: str, spec: AgentSpec) -> Any:
        """The adapter's sync `drive` from our store's state, without an event loop."""

    def state_text(self, paused: Any) -> str:
        """The SDK state a pause returned, as text (what a caller would save)."""

    def seen(self, agent: str) -> dict[str, str]:
        """The tool results agent `agent`'s model was last shown, as text, by call id."""

    def state_from_text(self, text: str) -> Any:
        """The state to pass to `drive` from what `state_text` wrote."""


def require(driver: Driver, feature: str) -> None:
    """Skip the test, saying why, when `driver`'s SDK cannot express `feature`."""
    if feature in driver.cannot:
        pytest.skip(f"{driver.name}: {driver.cannot[feature]}")


def fails_as(kind: type[Exception], fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, its `ValueError`s raised as `kind(message)` (the signature kept for the SDK)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ValueError as exc:
            raise kind(str(exc)) from exc

    return wrapper


def make_driver(name: str, workdir: Path) -> Driver:
    """The driver called `name`, keeping its files (a graph's checkpoints) in `workdir`."""
    if name == "openai-agents":
        from tests.adapters._driver_openai import OpenAIDriver

        return OpenAIDriver()
    if name == "langgraph":
        from tests.adapters._driver_langgraph import LangGraphDriver

        return LangGraphDriver(workdir)
    if name == "pydantic-ai":
        from tests.adapters._driver_pydantic_ai import PydanticAIDriver

        return PydanticAIDriver()
    if name == "claude-agent-sdk":
        from tests.adapters._driver_claude import ClaudeDriver

        return ClaudeDriver(workdir)
    raise ValueError(f"no driver {name!r}")


#: Every driver, with the SDK package it needs.
DRIVERS = {
    "openai-agents": "agents",
    "langgraph": "langgraph",
    "pydantic-ai": "pydantic_ai",
    "claude-agent-sdk": "claude_agent_sdk",
}


def resume_in_new_process(
    driver: Driver, workdir: Path, db: Path, run_id: str, spec: AgentSpec, state: str | None
) -> dict[str, Any]:
    """Resume `run_id` in a new process (from `state` text, or None: our store's kept state)."""
    state_arg = "-"
    if state is not None:
        state_file = workdir / "state.txt"
        state_file.write_text(state, encoding="utf-8")
        state_arg = str(state_file)
    argv = [driver.name, str(workdir), str(db), run_id, state_arg, json.dumps(spec.to_json())]
    out = subprocess.run(
        [sys.executable, "-m", "tests.adapters._drivers", *argv],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _main(name: str, workdir: str, db: str, run_id: str, state_file: str, spec: str) -> None:
    import os
    import socket

    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"

    def refuse(self: socket.socket, address: object) -> None:
        raise RuntimeError(f"network access attempted: {address!r}")

    socket.socket.connect = refuse  # type: ignore[method-assign]

    from agentfsm.stores import SQLiteEventStore

    driver = make_driver(name, Path(workdir))
    state = None
    if state_file != "-":
        state = driver.state_from_text(Path(state_file).read_text(encoding="utf-8"))
    store = SQLiteEventStore(db)
    done = driver.drive(store, run_id, AgentSpec.from_json(json.loads(spec)), state)
    print(json.dumps({"status": done.status, "final_output": done.final_output, "calls": CALLS}))


if __name__ == "__main__":
    # Run the imported module's `_main`, so its tools log to the `CALLS` the drivers share.
    from tests.adapters._drivers import _main as main

    main(*sys.argv[1:7])
