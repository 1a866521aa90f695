"""What a model adapter receives and returns.

The Runner calls `agent.model(context)` once per turn. The model gets a `ModelContext` (the
run's record, the outcomes of the previous batch, why its previous decision was refused if
it was, whether this is the wrap-up turn, the time left) and answers with a `Decision`: a
final answer, a batch of tool calls, a handoff to another agent, or an event of the run's
own lifecycle it proposes (`Decision.emit`), each with the usage the call cost.

A streaming adapter may instead return an iterable of chunks (`TextDelta`, `ToolCallDelta`,
`UsageDelta`, `HandoffDelta`); `StreamAssembler` folds them into a `Decision`. A tool call's
arguments arrive as JSON text in fragments and are parsed only when the call is complete, so
a call whose arguments are still streaming never enters the batch: if the stream ends with
one unfinished, the whole model call fails (`IncompleteStreamError`, retryable) and the
Runner asks the model again; nothing partial is ever executed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal

import attrs

from agentfsm.errors import IncompleteStreamError, ModelError
from agentfsm.events.models import Refusal, Usage
from agentfsm.runtime.tools import Emit

if TYPE_CHECKING:
    from agentfsm.record import Action, RunRecord

__all__ = [
    "Decision",
    "HandoffDelta",
    "ModelChunk",
    "ModelContext",
    "ProposedCall",
    "StreamAssembler",
    "TextDelta",
    "ToolCallDelta",
    "UsageDelta",
]


def _arguments(value: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise TypeError(f"tool call arguments must be a JSON object (str keys), got {value!r}")
    return dict(value)


@attrs.frozen
class ProposedCall:
    """One tool call the model proposes.

    Attributes:
        tool: the tool's name (an unknown name is fed back to the model as a tool error).
        arguments: the call's arguments, a JSON object.
        action_id: the model's own id for the call (e.g. an API's `call_id`); the Runner
            generates one when it is missing or already used in the run.
    """

    tool: str
    arguments: dict[str, Any] = attrs.field(factory=dict, converter=_arguments)
    action_id: str | None = None


def _usage(value: Usage | Mapping[str, Any] | None) -> Usage | None:
    """A decision's usage: a `Usage`, or a mapping of its fields, validated now.

    Checked where the decision is built (inside the model call), so a bad one fails that
    call with a clear error instead of the Runner half-way through recording it.
    """
    if value is None or isinstance(value, Usage):
        return value
    if isinstance(value, Mapping):
        return Usage.model_validate(dict(value))
    raise TypeError(
        f"usage must be a Usage or a mapping of its fields, got {type(value).__name__}: {value!r}"
    )


#: What a decision's `usage` may be given as: a `Usage`, or a dict of its fields.
UsageLike = Usage | Mapping[str, Any]


DecisionKind = Literal["final", "tool_calls", "handoff", "emit"]


@attrs.frozen
class Decision:
    """What one model call decided (recorded as `model.completed`).

    Build one with `Decision.answer`, `Decision.call_tools`, `Decision.hand_off` or
    `Decision.emit`.

    Attributes:
        kind: `final`, `tool_calls`, `handoff` or `emit`.
        output: the answer (final), or any text the model said beside its calls.
        tool_calls: the proposed calls (only for `tool_calls`; at least one).
        to_agent: the agent to hand off to (only for `handoff`).
        event: the event of the run's lifecycle it proposes (only for `emit`).
        usage: tokens and cost of the call: a `Usage`, or a dict of its fields
            (`{"input_tokens": 900, "output_tokens": 80}`), validated into one.
    """

    kind: DecisionKind
    output: Any = None
    tool_calls: tuple[ProposedCall, ...] = ()
    to_agent: str | None = None
    usage: Usage | None = attrs.field(default=None, converter=_usage)
    event: Emit | None = None

    def __attrs_post_init__(self) -> None:
        if self.kind == "tool_calls" and not self.tool_calls:
            raise ValueError("a 'tool_calls' decision needs at least one call")
        if self.kind != "tool_calls" and self.tool_calls:
            raise ValueError(f"a '{self.kind}' decision cannot carry tool calls")
        if (self.kind == "handoff") != bool(self.to_agent):
            raise ValueError("'to_agent' is given exactly for a 'handoff' decision")
        if (self.kind == "emit") != (self.event is not None):
            raise ValueError("'event' is given exactly for an 'emit' decision")
        if self.event is not None and not isinstance(self.event, Emit):
            raise TypeError(f"an 'emit' decision's event is an Emit, got {self.event!r}")

    # The builders are verbs (what the model decided to do), never the name of a field or
    # of a kind: `Decision.tool_calls` is the field, so a builder of that name would shadow
    # it on the class and calling the field would fail with "'member_descriptor' object is
    # not callable". One builder per kind: answer -> `final`, call_tools -> `tool_calls`,
    # hand_off -> `handoff`, emit -> `emit` (its field is `event`, as hand_off's is
    # `to_agent`).

    @classmethod
    def answer(cls, output: Any, *, usage: UsageLike | None = None) -> Decision:
        """A final answer (kind `final`; the run completes once the Runner accepts it)."""
        return cls("final", output=output, usage=usage)

    @classmethod
    def call_tools(
        cls, *calls: ProposedCall, usage: UsageLike | None = None, output: Any = None
    ) -> Decision:
        """A batch of tool calls (kind `tool_calls`), run before the model is called again."""
        return cls("tool_calls", output=output, tool_calls=calls, usage=usage)

    @classmethod
    def hand_off(
        cls, to_agent: str, *, output: Any = None, usage: UsageLike | None = None
    ) -> Decision:
        """Hand the run to another agent (kind `handoff`); turns and budget carry on."""
        return cls("handoff", output=output, to_agent=to_agent, usage=usage)

    @classmethod
    def emit(cls, event: Emit, *, output: Any = None, usage: UsageLike | None = None) -> Decision:
        """Propose one event of the run's own lifecycle (kind `emit`): the model proposes,
        the table decides. Legal where the run stands, it is appended with the decision;
        otherwise the decision is recorded as `refused` and the next turn reads why, with
        the events that were allowed (`ModelContext.refusal`)."""
        return cls("emit", output=output, usage=usage, event=event)


@attrs.frozen
class ModelContext:
    """What the model sees on one turn.

    Attributes:
        run_id: the run.
        agent: the agent in charge (its name).
        turn: this turn's number (1 for the first model call).
        objective: what the run was started for.
        record: the run's record as of this call (the whole ledger, usage, facts).
        results: the previous batch's actions, resolved: succeeded (with `result`), failed
            (with `error`), rejected (with `reason`) or unknown; empty on the first turn. A
            call that proposed an event of the lifecycle carries it (`emit`), with the
            sequence it was applied at (`emitted`) or why it was not (`refusal`, with the
            events that were `allowed`).
        wrap_up: this is the last turn the limits allow: answer, do not call tools (only
            set when the Runner was configured to reserve a wrap-up turn).
        remaining: seconds before the run's deadline, or None without one.
        now: the Runner's clock reading for this call.
        refusal: why the previous decision was refused, when it was (`results` is then
            empty: none of its calls ran): its `message` says what to do instead, e.g.
            `1,000 calls proposed in one decision; at most 64 are allowed: ...`, and
            `proposed` sums up what was asked; for an event it proposed, `allowed` lists
            the events the table allowed instead. Tell the model, and let it try again.
    """

    run_id: str
    agent: str | None
    turn: int
    objective: str | None
    record: RunRecord
    results: tuple[Action, ...]
    wrap_up: bool
    remaining: float | None
    now: datetime
    refusal: Refusal | None = None


# -- streaming ------------------------------------------------------------------------------


@attrs.frozen
class TextDelta:
    """A fragment of the model's text output."""

    text: str


@attrs.frozen
class ToolCallDelta:
    """A fragment of tool call `index`: its name and id (usually first), then argument text.

    Attributes:
        index: which call of the batch this fragment belongs to.
        tool: the tool's name, once known.
        action_id: the model's id for the call, once known.
        arguments: the next piece of the arguments' JSON text.
        done: the call is complete (its arguments are all there); optional, since a
            call is also complete when the stream ends.
    """

    index: int
    tool: str | None = None
    action_id: str | None = None
    arguments: str = ""
    done: bool = False


def _delta_usage(value: UsageLike) -> Usage:
    usage = _usage(value)
    if usage is None:
        raise TypeError("a UsageDelta needs a usage, got None")
    return usage


@attrs.frozen
class UsageDelta:
    """The call's usage (usually the last chunk); a later one replaces an earlier one.

    A dict of `Usage` fields is validated into a `Usage`, as for `Decision`.
    """

    usage: Usage = attrs.field(converter=_delta_usage)


@attrs.frozen
class HandoffDelta:
    """The model hands the run to another agent."""

    to_agent: str


#: One piece of a streamed model turn: text, a tool call, token usage or a handoff.
ModelChunk = TextDelta | ToolCallDelta | UsageDelta | HandoffDelta


@attrs.define
class _Partial:
    tool: str | None = None
    action_id: str | None = None
    text: list[str] = attrs.field(factory=list)
    done: bool = False


class StreamAssembler:
    """Folds streamed chunks into one `Decision`; only complete, parsed calls come out.

    `complete_calls()` may be read while the stream is running (to show progress); a call
    is complete once it is marked `done`. `finish()` is the decision at the end.
    """

    def __init__(self) -> None:
        self._text: list[str] = []
        self._calls: dict[int, _Partial] = {}
        self._usage: Usage | None = None
        self._handoff: str | None = None

    def feed(self, chunk: ModelChunk) -> None:
        """Take one chunk."""
        if isinstance(chunk, TextDelta):
            self._text.append(chunk.text)
        elif isinstance(chunk, ToolCallDelta):
            part = self._calls.setdefault(chunk.index, _Partial())
            if part.done:
                raise ModelError(f"tool call {chunk.index} got a fragment after it was done")
            if chunk.tool is not None:
                part.tool = chunk.tool
            if chunk.action_id is not None:
                part.action_id = chunk.action_id
            part.text.append(chunk.arguments)
            part.done = chunk.done
        elif isinstance(chunk, UsageDelta):
            self._usage = chunk.usage
        elif isinstance(chunk, HandoffDelta):
            self._handoff = chunk.to_agent
        else:
            raise TypeError(f"not a model chunk: {chunk!r}")

    def complete_calls(self) -> tuple[ProposedCall, ...]:
        """The calls marked done so far, parsed (in index order)."""
        return tuple(_parse(i, p) for i, p in sorted(self._calls.items()) if p.done)

    def finish(self) -> Decision:
        """The decision the stream made.

        Raises:
            IncompleteStreamError: a call has no tool name, or arguments that are not a
                complete JSON object.
        """
        text = "".join(self._text) or None
        if self._calls:
            calls = tuple(_parse(i, p) for i, p in sorted(self._calls.items()))
            return Decision.call_tools(*calls, usage=self._usage, output=text)
        if self._handoff is not None:
            return Decision.hand_off(self._handoff, output=text, usage=self._usage)
        return Decision.answer(text, usage=self._usage)


def _parse(index: int, part: _Partial) -> ProposedCall:
    if not part.tool:
        raise IncompleteStreamError(f"tool call {index} never named its tool", index=index)
    raw = "".join(part.text) or "{}"
    try:
        arguments = json.loads(raw)
    except ValueError:
        raise IncompleteStreamError(
            f"tool call {index} ('{part.tool}') ended with incomplete arguments: {raw[:80]!r}",
            index=index,
        ) from None
    if not isinstance(arguments, dict):
        raise IncompleteStreamError(
            f"tool call {index} ('{part.tool}') arguments are not a JSON object: {raw[:80]!r}",
            index=index,
        )
    return ProposedCall(part.tool, arguments, part.action_id)
