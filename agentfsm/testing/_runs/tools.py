"""The agent's tools as the kit sees them: their names, the events each may propose, and
example results.

A real log names the user's tools (`check_credit`, `request_documents`), and a table's
conditions may read which tool ran, what it returned (`record.facts`, `tool.completed.result`)
or that a call proposed an event (`emitted_by`). So the kit generates calls to the tools it
is told about, results drawn from the strategies given per tool, and the events a tool
declares it may propose (`Tool(emits=...)`). Told nothing, it calls one tool, `lookup`,
which proposes nothing.

The testing kit reads tools by their shape (a `.name`, an `.emits`; an agent's `.tools`), so
it does not import the runtime.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs
from hypothesis import strategies as st

from agentfsm.events.vocabulary import EventTypes
from agentfsm.testing._runs.sampling import samples

__all__ = ["DEFAULT_TOOLS", "Tools", "ToolsLike", "tool_set"]


@runtime_checkable
class _ToolShape(Protocol):
    """What the kit reads of a `agentfsm.runtime.Tool`."""

    @property
    def name(self) -> str: ...

    @property
    def emits(self) -> tuple[str, ...]: ...


#: What `legal_runs(tools=...)` takes: an `Agent` (its tools), a `ToolRegistry` or a list of
#: `Tool`s or names, or a mapping of each tool's name to the event types it may propose.
ToolsLike = object


# Compared by identity: results are JSON (unhashable), and the searches cache by `Tools`.
@attrs.frozen(eq=False)
class Tools:
    """The tools a generated run calls, in order (the first is the plainest).

    Attributes:
        names: every tool's name.
        emits: per tool (by place in `names`), the event types its calls may propose.
        results: per tool (by place in `names`), example results besides `None`.
    """

    names: tuple[str, ...]
    emits: tuple[tuple[str, ...], ...]
    results: tuple[tuple[Any, ...], ...]

    def emits_of(self, tool: str) -> tuple[str, ...]:
        """The event types a call of `tool` may propose (none for a tool not known)."""
        return self.emits[self.names.index(tool)] if tool in self.names else ()

    def results_of(self, tool: str) -> tuple[Any, ...]:
        """The example results of `tool` (besides `None`)."""
        return self.results[self.names.index(tool)] if tool in self.names else ()

    @property
    def any_emits(self) -> bool:
        return any(self.emits)


#: Told nothing: one tool, `lookup`, which proposes no event.
DEFAULT_TOOLS = Tools(("lookup",), ((),), ((),))

#: How many examples of each result strategy the kit tries.
_RESULT_SAMPLES = 6


def _named(tools: object) -> dict[str, tuple[str, ...]]:
    agent_tools = getattr(tools, "tools", None)
    if agent_tools is not None and not isinstance(tools, Mapping):
        tools = agent_tools  # an Agent: its registry
    if isinstance(tools, Mapping):
        return {str(name): tuple(emits) for name, emits in tools.items()}
    if isinstance(tools, str) or not isinstance(tools, Iterable):
        raise TypeError(
            "tools= wants an Agent, a ToolRegistry, a list of Tools or tool names, or a "
            f"mapping of tool names to the event types they may propose; got {tools!r}"
        )
    out: dict[str, tuple[str, ...]] = {}
    for tool in tools:
        if isinstance(tool, str):
            out[tool] = ()
        elif isinstance(tool, _ToolShape):
            out[tool.name] = tuple(tool.emits)
        else:
            raise TypeError(f"tools= lists {tool!r}, which is neither a Tool nor a tool's name")
    return out


def tool_set(
    tools: ToolsLike | None,
    results: Mapping[str, st.SearchStrategy[Any]] | None,
    events: EventTypes,
) -> Tools:
    """The `Tools` of `legal_runs(tools=..., results=...)`, checked against the table's types.

    Raises:
        ValueError: no tool is named, a tool declares an event type the table does not have
            as its own, or `results` names a tool not among them.
        TypeError: `tools` is of no shape the kit reads.
    """
    if tools is None and not results:
        return DEFAULT_TOOLS
    named = {"lookup": ()} if tools is None else _named(tools)
    if not named:
        raise ValueError("tools= names no tool")
    for name, emits in named.items():
        unknown = [t for t in emits if t not in events.custom]
        if unknown:
            raise ValueError(
                f"tool '{name}' proposes {unknown}, which are not event types of the table's "
                f"own ({list(events.custom)})"
            )
    given = dict(results or {})
    strangers = sorted(set(given) - set(named))
    if strangers:
        raise ValueError(f"results= for tools {strangers}; the tools are {sorted(named)}")
    names = tuple(named)
    return Tools(
        names,
        tuple(named[n] for n in names),
        tuple(_distinct(samples(given[n], _RESULT_SAMPLES)) if n in given else () for n in names),
    )


def _distinct(values: Iterable[Any]) -> tuple[Any, ...]:
    out: list[Any] = []
    for v in values:
        if v is not None and v not in out:
            out.append(v)
    return tuple(out)
