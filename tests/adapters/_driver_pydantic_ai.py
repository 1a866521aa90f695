"""The scenarios' driver for pydantic-ai: `Agent.iter()` with a scripted `FunctionModel`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from pydantic_ai import Agent, DeferredToolRequests, ModelRetry, RunContext
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage
from structlog.testing import capture_logs

from agentfsm.adapters.pydantic_ai import AgentIterRun
from agentfsm.events import Limits
from agentfsm.stores.base import EventStore
from tests.adapters._common import run as drive
from tests.adapters._drivers import AgentSpec, Say, Step, Sub, fails_as

USAGE = RequestUsage(input_tokens=10, output_tokens=5)


def _response(step: Step) -> ModelResponse:
    if isinstance(step, Say):
        return ModelResponse(parts=[TextPart(step.text)], usage=USAGE)
    parts = [ToolCallPart(c.tool, c.args, tool_call_id=c.call_id) for c in step]
    return ModelResponse(parts=parts, usage=USAGE)


def _scripted(steps: tuple[Step, ...], seen: dict[str, str]) -> FunctionModel:
    """A model answering each request with the next step (as the other SDKs' scripts do);
    `seen` is kept to the tool results of the request it last answered."""
    left = [_response(s) for s in steps]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = getattr(messages[-1], "parts", ())
        seen.clear()
        seen.update(
            {p.tool_call_id: str(p.content) for p in parts if getattr(p, "tool_call_id", None)}
        )
        return left.pop(0)

    return FunctionModel(respond)


class PydanticAIDriver:
    """Builds an `Agent` (output `str | DeferredToolRequests`); subagents use `delegate`.

    A tool's `ValueError` is raised as `ModelRetry`: pydantic-ai then hands it to the model,
    as the other SDKs hand a failed call's error (a plain exception ends its run).
    """

    name = "pydantic-ai"
    state_name = "pydantic-ai/messages"
    failed_kind = "retried"
    refused_call_tokens = 0
    approval_signal = "pydantic-ai DeferredToolRequests"
    corrupt_state = (b'[{"kind": "nonsense"}]', "it does not load: ValidationError: ")
    cannot: ClassVar[Mapping[str, str]] = {}

    def __init__(self) -> None:
        #: What each agent's model was last shown (see `seen`), by the agent's name.
        self.shown: dict[str, dict[str, str]] = {}

    def build(self, spec: AgentSpec, run: AgentIterRun) -> Agent[None, str | DeferredToolRequests]:
        """The SDK agent `spec` describes, its subagents run under `run`."""
        model = _scripted(spec.steps, self.shown.setdefault(spec.name, {}))
        agent: Agent[None, str | DeferredToolRequests] = Agent(
            model, output_type=[str, DeferredToolRequests], name=spec.name
        )
        for t in spec.tools:
            fn = fails_as(ModelRetry, t.fn)
            agent.tool_plain(fn, name=t.name, requires_approval=t.needs_approval)
        for sub in spec.subagents:
            agent.tool(self._asking(sub, run), name=sub.tool)
        return agent

    def _asking(self, sub: Sub, run: AgentIterRun) -> Any:
        child = self.build(sub.agent, run)

        async def ask(ctx: RunContext[None], question: str) -> Any:
            """Ask the subagent."""
            return await run.adelegate(ctx, child, question)

        return ask

    def run(self, store: EventStore, run_id: str, spec: AgentSpec, *, prompt: str = "weather?",
            limits: Limits | None = None, **options: Any) -> Any:  # fmt: skip
        """`AgentIterRun.arun`."""
        run = AgentIterRun(store, run_id, **options)
        return drive(run.arun(self.build(spec, run), prompt, limits=limits))

    def drive(self, store: EventStore, run_id: str, spec: AgentSpec, state: Any = None,
              **options: Any) -> Any:  # fmt: skip
        """`AgentIterRun.adrive`."""
        run = AgentIterRun(store, run_id, **options)
        return drive(run.adrive(self.build(spec, run), state))

    def run_without_loop(self, store: EventStore, run_id: str, spec: AgentSpec, prompt: str) -> Any:
        """`AgentIterRun.run` (sync)."""
        run = AgentIterRun(store, run_id)
        with capture_logs():
            return run.run(self.build(spec, run), prompt)

    def drive_without_loop(self, store: EventStore, run_id: str, spec: AgentSpec) -> Any:
        """`AgentIterRun.drive` (sync)."""
        run = AgentIterRun(store, run_id)
        with capture_logs():
            return run.drive(self.build(spec, run))

    def state_text(self, paused: Any) -> str:
        """The message history JSON."""
        return str(paused.state)

    def state_from_text(self, text: str) -> Any:
        """The message history JSON, as `adrive` takes it."""
        return text

    def seen(self, agent: str) -> dict[str, str]:
        """The tool return and retry parts of the last request the model answered."""
        return dict(self.shown[agent])
