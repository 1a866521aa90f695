"""The scenarios' driver for the OpenAI Agents SDK: `Runner` with a `ScriptedModel`."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, ClassVar

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents import Agent, Usage, function_tool, set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call

from agentfsm.adapters.openai_agents import AgentsRun, tool_failure
from agentfsm.events import Limits
from agentfsm.stores.base import EventStore
from tests.adapters._common import run as drive
from tests.adapters._drivers import AgentSpec, Say

set_tracing_disabled(True)

USAGE = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)


class OpenAIDriver:
    """Builds an `Agent` whose model plays the script; subagents are `agent_tool`s."""

    name = "openai-agents"
    state_name = "openai-agents/run_state"
    failed_kind = "ValueError"
    refused_call_tokens = 0
    approval_signal = "openai-agents RunResult.interruptions"
    corrupt_state = (b"{not json", "it does not load: JSONDecodeError: Expecting property")
    cannot: ClassVar[Mapping[str, str]] = {}

    def __init__(self) -> None:
        #: The scripted model of each agent built, by the agent's name.
        self.models: dict[str, ScriptedModel] = {}

    def build(self, spec: AgentSpec, run: AgentsRun) -> Agent[Any]:
        """The SDK agent `spec` describes, its subagent tools recorded under `run`."""
        subs = {s.tool for s in spec.subagents}
        steps = [
            [assistant_message(s.text)]
            if isinstance(s, Say)
            else [
                # An agent tool takes its question as `input`.
                function_call(
                    c.tool,
                    {"input": c.args["question"]} if c.tool in subs else c.args,
                    call_id=c.call_id,
                )
                for c in s
            ]
            for s in spec.steps
        ]
        tools: list[Any] = [
            function_tool(
                t.fn,
                name_override=t.name,
                needs_approval=t.needs_approval,
                failure_error_function=tool_failure,
            )
            for t in spec.tools
        ]
        tools += [
            run.agent_tool(self.build(s.agent, run), tool_name=s.tool) for s in spec.subagents
        ]
        model = ScriptedModel(steps, default_usage=USAGE)
        self.models[spec.name] = model
        return Agent(name=spec.name, model=model, tools=tools)

    def run(self, store: EventStore, run_id: str, spec: AgentSpec, *, prompt: str = "weather?",
            limits: Limits | None = None, **options: Any) -> Any:  # fmt: skip
        """`AgentsRun.arun`."""
        run = AgentsRun(store, run_id, **options)
        return drive(run.arun(self.build(spec, run), prompt, limits=limits))

    def drive(self, store: EventStore, run_id: str, spec: AgentSpec, state: Any = None,
              **options: Any) -> Any:  # fmt: skip
        """`AgentsRun.adrive`."""
        run = AgentsRun(store, run_id, **options)
        return drive(run.adrive(self.build(spec, run), state))

    def run_without_loop(self, store: EventStore, run_id: str, spec: AgentSpec, prompt: str) -> Any:
        """`AgentsRun.run` (sync)."""
        run = AgentsRun(store, run_id)
        return run.run(self.build(spec, run), prompt)

    def drive_without_loop(self, store: EventStore, run_id: str, spec: AgentSpec) -> Any:
        """`AgentsRun.drive` (sync)."""
        run = AgentsRun(store, run_id)
        return run.drive(self.build(spec, run))

    def state_text(self, paused: Any) -> str:
        """The `RunState` JSON."""
        return json.dumps(paused.state)

    def state_from_text(self, text: str) -> Any:
        """The `RunState` JSON, parsed."""
        return json.loads(text)

    def seen(self, agent: str) -> dict[str, str]:
        """The `function_call_output` items of the model's last input."""
        items = self.models[agent].calls[-1].input
        return {
            str(i["call_id"]): str(i["output"])
            for i in items
            if isinstance(i, dict) and i.get("type") == "function_call_output"
        }
