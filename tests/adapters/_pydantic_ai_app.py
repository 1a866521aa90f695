"""The agents the pydantic-ai adapter tests drive."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai import Agent, DeferredToolRequests, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

CALLS: list[str] = []
USAGE = RequestUsage(input_tokens=10, output_tokens=5)


def call(name: str, call_id: str, **args: Any) -> ModelResponse:
    """A response asking for one tool call (10 input, 5 output tokens)."""
    return ModelResponse(parts=[ToolCallPart(name, args, tool_call_id=call_id)], usage=USAGE)


def answer(text: str) -> ModelResponse:
    """A response with a final answer (10 input, 5 output tokens)."""
    return ModelResponse(parts=[TextPart(text)], usage=USAGE)


def scripted(*responses: ModelResponse) -> FunctionModel:
    """A model answering the n-th request of a run (counted in its history) with responses[n]."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return responses[sum(isinstance(msg, ModelResponse) for msg in messages)]

    return FunctionModel(respond)


def make_agent(*responses: ModelResponse, on_tool: Callable[[], None] | None = None) -> Agent:
    """An agent with get_weather and refund (refund needs approval)."""
    agent: Agent[None, str | DeferredToolRequests] = Agent(
        scripted(*responses), output_type=[str, DeferredToolRequests], name="weather"
    )

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        CALLS.append(f"get_weather {city}")
        if on_tool is not None:
            on_tool()
        if city == "Atlantis":
            raise ModelRetry("no such city")
        return f"sunny in {city}"

    @agent.tool_plain(requires_approval=True)
    def refund(order_id: str) -> str:
        """Refund an order."""
        CALLS.append(f"refund {order_id}")
        return f"refunded {order_id}"

    return agent


REFUND = (call("refund", "call_r1", order_id="O-1"), answer("Done."))
