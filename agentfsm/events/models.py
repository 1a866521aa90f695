"""The wire format: one pydantic model per event type, one discriminated union on `type`.

Validation happens here, at the edge, once. The reducer works on these already-validated
objects and never validates again. Models are strict (`"2"` is not an integer), closed
(unknown fields are errors) and frozen (an event is a fact; it does not change).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainValidator,
    TypeAdapter,
    ValidationInfo,
    model_validator,
)
from pydantic_core import CoreSchema, core_schema

from agentfsm.errors import quoted
from agentfsm.events._bounds import (
    MAX_EVENT_BYTES,
    PARSED_TEXT,
    check_json_value,
    check_parsed_value,
    parsed_within,
)

__all__ = [
    "EVENT_ADAPTER",
    "EVENT_CLASSES",
    "ApprovalAccepted",
    "ApprovalRejected",
    "ApprovalRequested",
    "CustomEvent",
    "EmitRefused",
    "EmittedBy",
    "ErrorInfo",
    "Event",
    "Handoff",
    "Limits",
    "ModelCompleted",
    "ModelFailed",
    "ModelStarted",
    "Proposal",
    "ProposedEvent",
    "Refusal",
    "RunCancelRequested",
    "RunCancelled",
    "RunCompleted",
    "RunFailed",
    "RunForked",
    "RunMigrated",
    "RunPaused",
    "RunResumed",
    "RunStarted",
    "RunTerminated",
    "TableRef",
    "Timestamp",
    "ToolCall",
    "ToolCompleted",
    "ToolFailed",
    "ToolOutcomeUnknown",
    "ToolRequested",
    "ToolStarted",
    "Usage",
    "UsageReported",
    "parse_timestamp",
]

_RFC3339 = re.compile(
    r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})\Z"
)


#: Digits as `d`, every other byte as itself: the shape of a timestamp's text.
_SHAPE = bytes.maketrans(b"0123456789", b"dddddddddd")
#: The shapes `datetime.fromisoformat` reads exactly as `parse_timestamp`'s full path does
#: (upper-case `T` and `Z`, at most six digits of a second: no case to fold, no digit to
#: cut), and which `_RFC3339` matches: what every writer of events stamps.
_PLAIN_SHAPES = frozenset(
    f"dddd-dd-ddTdd:dd:dd{fraction}{offset}".encode()
    for fraction in ["", *("." + "d" * n for n in range(1, 7))]
    for offset in ("Z", "+dd:dd", "-dd:dd")
)


def parse_timestamp(value: str) -> datetime:
    """Parse an RFC 3339 timestamp with an offset into an aware `datetime`."""
    # Every event's timestamp is checked, and the regex (Unicode `\d` at every position)
    # cost 1.2 µs of a 12 µs parse: the usual shapes are recognised by one table lookup
    # in C instead (a byte past ASCII is no `d` and no separator: not a plain shape).
    if _plain(value):
        return _fromisoformat(value)
    if not _RFC3339.match(value):
        raise ValueError(
            f"{quoted(value)} is not an RFC 3339 timestamp with an offset "
            "(like 2026-09-01T10:02:11+08:00 or 2026-09-01T02:02:11Z)"
        )
    # fromisoformat takes at most microseconds; keep the original string, check the rest.
    head, dot, tail = value.partition(".")
    if dot:
        digits = len(tail) - len(tail.lstrip("0123456789"))
        if digits > 6:
            value = head + "." + tail[:6] + tail[digits:]
    # RFC 3339 allows a lower-case `t` and `z`; fromisoformat does not.
    return datetime.fromisoformat(value.upper())


_fromisoformat = datetime.fromisoformat


def _plain(value: str) -> bool:
    """Whether `value` has one of the `_PLAIN_SHAPES`."""
    try:
        return value.encode().translate(_SHAPE) in _PLAIN_SHAPES
    except UnicodeEncodeError:  # a lone surrogate
        return False


# The timestamps `parse_timestamp` reads, as one regular expression over ASCII digits: a
# real date (the days of each month, February's 29th in leap years, no year 0), a real
# time of day (no leap second), one to nine digits of a second, `Z` or an offset under 24
# hours (as `datetime` takes it, minutes past 59 included). pydantic-core matches it in
# Rust: the check a Python validator made cost every event's validation 3,000 instructions
# (a call, an encode, a lookup, a parse) of about 26,000. tests/test_parse_speed_paths.py
# holds it to `parse_timestamp`'s verdict, field by field, exhaustively.
_YEAR = r"(?:[0-9]{3}[1-9]|[0-9]{2}[1-9][0-9]|[0-9][1-9][0-9]{2}|[1-9][0-9]{3})"
_LEAP_YEAR = r"(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00)"
_DATE = (
    rf"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
    rf"|{_LEAP_YEAR}-02-29)"
)
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
_ZONE = r"(?:[Zz]|[+-](?:(?:[01][0-9]|2[0-2]):[0-9]{2}|23:[0-5][0-9]))"
#: Every text an event's timestamp may be, whole: `TIMESTAMP_PATTERN.fullmatch(text)`.
TIMESTAMP_PATTERN = re.compile(rf"{_DATE}[Tt]{_TIME}{_ZONE}")

_TIMESTAMP_PROBLEM = (
    "not an RFC 3339 timestamp of a real date and time with an offset "
    "(like 2026-09-01T10:02:11+08:00 or 2026-09-01T02:02:11Z)"
)


class _TimestampText:
    """The core schema of a `Timestamp`: a string matching `TIMESTAMP_PATTERN`, in Rust.

    Any refusal (not a string, not the pattern, a lone surrogate) is the one error
    `timestamp`; `parse_event` says what exactly is wrong (`timestamp_problem`).
    """

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> CoreSchema:
        return core_schema.custom_error_schema(
            core_schema.str_schema(
                pattern=f"^{TIMESTAMP_PATTERN.pattern}$", strict=True, regex_engine="rust-regex"
            ),
            custom_error_type="timestamp",
            custom_error_message=_TIMESTAMP_PROBLEM,
        )


def timestamp_problem(value: object) -> str:
    """What is wrong with `value` as an event's timestamp, in `parse_timestamp`'s words."""
    if not isinstance(value, str):
        return f"Input should be a valid string (got {quoted(value)})"
    try:
        parse_timestamp(value)
    except ValueError as exc:
        return str(exc)
    return f"{quoted(value)} is {_TIMESTAMP_PROBLEM}"  # not reached: the two agree (see above)


#: An RFC 3339 timestamp with an offset. Kept as the original string so events round-trip
#: byte for byte; `parse_timestamp` gives the `datetime`.
Timestamp = Annotated[
    str,
    _TimestampText(),
    # The shape for producers that validate with JSON Schema (ECMA-262 regex syntax).
    Field(
        json_schema_extra={
            "format": "date-time",
            "pattern": (
                r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$"
            ),
        }
    ),
]
#: Whether a string is a `Timestamp`: the events' own check, for text made outside them.
is_timestamp: Callable[[object], bool] = TypeAdapter(Timestamp).validator.isinstance_python

# A constrained `str` is checked as Unicode by pydantic (a bare `str` lets a lone surrogate
# through, which no JSON line can hold); the bound is the event size limit.
NonEmpty = Annotated[str, Field(min_length=1, max_length=MAX_EVENT_BYTES)]
Text = Annotated[str, Field(max_length=MAX_EVENT_BYTES)]
NonNegInt = Annotated[int, Field(ge=0)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]


# What pydantic does with a JSON value not read from text: the models are strict.
_json_value = TypeAdapter(JsonValue, config=ConfigDict(strict=True)).validator.validate_python
_arguments = TypeAdapter(
    dict[str, JsonValue], config=ConfigDict(strict=True)
).validator.validate_python


def _bounded(value: Any, info: ValidationInfo) -> Any:
    if info.context is PARSED_TEXT:
        # Read from text by jiter (`parse_event` says so): every value is of a JSON type
        # already, fresh and unshared, so pydantic's own pass over it (a Python call per
        # nested value, and a copy) has nothing to do, and the limits are looked for only
        # where jiter does not enforce them itself: `check_parsed_value`, whose first steps
        # are spelled here (a call less for every value: a quarter of this check's cost).
        cls = value.__class__
        if cls is dict or cls is list:
            if parsed_within(value, 0):
                return value
        elif cls is not float and cls is not int:
            return value
        return check_parsed_value(value)  # a number, or a value past a limit: says where
    return _json_value(check_json_value(value))


def _bounded_object(value: Any, info: ValidationInfo) -> Any:
    if info.context is PARSED_TEXT and value.__class__ is dict:  # jiter's keys are strings
        return value if parsed_within(value, 0) else check_parsed_value(value)
    return _arguments(check_json_value(value))


# Plain validators, not wrap ones: pydantic-core calls a wrap validator with a handler it
# builds for the call, which cost 1,500 instructions a value more than the check itself.
#: A JSON value within the limits of `agentfsm.events._bounds` (depth, finite numbers,
#: printable integers, valid Unicode), checked before pydantic walks it.
Json = Annotated[JsonValue, PlainValidator(_bounded, json_schema_input_type=JsonValue)]
Arguments = Annotated[
    dict[str, JsonValue],
    PlainValidator(_bounded_object, json_schema_input_type=dict[str, JsonValue]),
]
#: `sha256:` and 64 lower-case hex digits (`agentfsm.events.call_digest`).
Digest = Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]

# ser_json_inf_nan: an event built without validation may hold NaN or Infinity; written as
# JSON's `null` (pydantic's default) it would be stored as another value without a word.
# Written as `NaN`, no reader takes the line, and a store refuses the event.
_STRICT = ConfigDict(extra="forbid", strict=True, frozen=True, ser_json_inf_nan="constants")


class _Part(BaseModel):
    model_config = _STRICT


class Limits(_Part):
    """Per-run limits, given on `run.started` (all optional)."""

    max_turns: Annotated[int, Field(ge=1)] | None = None
    deadline: Timestamp | None = None
    max_tokens: NonNegInt | None = None
    max_cost: NonNegFloat | None = None
    max_calls_per_decision: Annotated[int, Field(ge=1)] | None = None


class TableRef(_Part):
    """Which table a run was started under: its name and the digest of its content.

    A run is folded with the table it started with; folding it with another is refused,
    naming both (`agentfsm.fsm.TransitionTable.ref`).
    """

    name: NonEmpty
    digest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]


class Usage(_Part):
    """Tokens and cost reported with a model call."""

    input_tokens: NonNegInt = 0
    output_tokens: NonNegInt = 0
    cost: NonNegFloat = 0.0


class ToolCall(_Part):
    """One call the model proposed."""

    action_id: NonEmpty
    tool: NonEmpty
    arguments: Arguments


#: Tools a refusal's summary names (the most proposed first); the calls to others are counted
#: in `Proposal.calls` only. With the bounds below, a refusal is a few kilobytes at most,
#: whatever the model proposed.
REFUSAL_TOOLS = 16
#: Characters of a tool's or an event type's name in a refusal (a longer one is cut, ending
#: in `…`).
REFUSAL_NAME_CHARS = 128
#: Event types a refusal lists as allowed (`Refusal.allowed`; the first, sorted).
REFUSAL_ALLOWED = 32
#: Characters of a refusal's `kind` and `message`.
REFUSAL_KIND_CHARS = 64
REFUSAL_MESSAGE_CHARS = 2000

_Name = Annotated[str, Field(min_length=1, max_length=REFUSAL_NAME_CHARS)]


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


class Proposal(_Part):
    """What a refused proposal proposed, summed up: never the calls or fields themselves.

    Attributes:
        decision: what the model decided (`final`, `tool_calls`, `handoff` or `emit`); None
            for an event a tool's call proposed (`emit.refused`).
        calls: how many calls it proposed.
        tools: calls per tool, for the `REFUSAL_TOOLS` tools it proposed most (their
            names cut to `REFUSAL_NAME_CHARS`); calls to any other tool count in `calls`.
        event: the event type it proposed (`emit`), cut to `REFUSAL_NAME_CHARS`.
    """

    decision: Literal["final", "tool_calls", "handoff", "emit"] | None = None
    calls: NonNegInt = 0
    tools: Annotated[dict[_Name, Annotated[int, Field(ge=1)]], Field(max_length=REFUSAL_TOOLS)] = {}
    event: _Name | None = None

    def __repr_args__(self) -> Any:
        # What was not proposed (no decision for a call's event, no event for calls) is left
        # out of the repr, as it is out of the log line.
        return [(k, v) for k, v in super().__repr_args__() if v is not None]

    @model_validator(mode="after")
    def _counted(self) -> Proposal:
        named = sum(self.tools.values())
        if named > self.calls:
            raise ValueError(f"'tools' counts {named} calls, more than 'calls' ({self.calls})")
        return self

    @classmethod
    def of(cls, decision: str | None, tools: Iterable[str], event: str | None = None) -> Proposal:
        """The summary of a decision of kind `decision` proposing calls to `tools` (one name
        per call, repeats and all): the counts of the most proposed tools, ties by name; and
        the type of the event it proposed, if it proposed one."""
        counts = Counter(_cut(tool, REFUSAL_NAME_CHARS) for tool in tools)
        top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:REFUSAL_TOOLS]
        given: dict[str, Any] = {"calls": sum(counts.values()), "tools": dict(top)}
        if decision is not None:  # only what is given is written (`exclude_unset`)
            given["decision"] = decision
        if event is not None:
            given["event"] = _cut(event, REFUSAL_NAME_CHARS)
        return cls(**given)


class Refusal(_Part):
    """Why a proposal was refused, and what it proposed: a model's decision (`model.completed`
    with decision `refused`) or the event a tool's call proposed (`emit.refused`). A bounded
    fact, whatever was proposed.

    Attributes:
        kind: what refused it: the guard's name (`max_calls_per_decision`), or for a proposed
            event `not_allowed` (the table has no move for it where the run stands),
            `invalid_fields`, `unknown_event`, `undeclared` (the tool does not declare it) or
            `run_ended` (the run ended before it was judged).
        message: why, in a sentence the model can act on on its next turn.
        proposed: what was proposed, summed up.
        allowed: for a proposed event, the event types that would have been allowed
            instead (the table's own types with a move where the run stood, sorted, the
            first `REFUSAL_ALLOWED`); None where it does not apply.
    """

    kind: Annotated[str, Field(min_length=1, max_length=REFUSAL_KIND_CHARS)]
    message: Annotated[str, Field(max_length=REFUSAL_MESSAGE_CHARS)]
    proposed: Proposal
    allowed: Annotated[list[_Name], Field(max_length=REFUSAL_ALLOWED)] | None = None

    @classmethod
    def of(
        cls, kind: str, message: str, proposed: Proposal, allowed: Iterable[str] | None = None
    ) -> Refusal:
        """A refusal with `kind` and `message` cut to their bounds (`…` marks a cut), and at
        most `REFUSAL_ALLOWED` of `allowed`, sorted."""
        given: dict[str, Any] = {
            "kind": _cut(kind, REFUSAL_KIND_CHARS),
            "message": _cut(message, REFUSAL_MESSAGE_CHARS),
            "proposed": proposed,
        }
        if allowed is not None:
            named = {_cut(a, REFUSAL_NAME_CHARS) for a in allowed}
            given["allowed"] = sorted(named)[:REFUSAL_ALLOWED]
        return cls(**given)


#: The envelope every event carries; a proposed event's fields may not name these (the
#: writer stamps them), nor `emitted_by` (the runtime does).
_ENVELOPE_FIELDS = frozenset({"run_id", "sequence", "type", "occurred_at", "event_id"})
_STAMPED_FIELDS = _ENVELOPE_FIELDS | {"emitted_by"}


class ProposedEvent(_Part):
    """An event of the run's own lifecycle that a tool's call or a model's decision proposes
    (`tool.completed.emit`, `model.completed.emit`): its type and its own fields.

    Durable with the step that proposed it; the runtime then judges it against the table
    and appends it (with `emitted_by`) or records why not (`emit.refused`, or the decision
    as `refused`).
    """

    type: NonEmpty
    fields: Arguments = {}

    @model_validator(mode="after")
    def _own_fields(self) -> ProposedEvent:
        stamped = sorted(_STAMPED_FIELDS.intersection(self.fields))
        if stamped:
            raise ValueError(
                f"fields {', '.join(map(repr, stamped))} are stamped by the runtime, not proposed"
            )
        return self


class EmittedBy(_Part):
    """What proposed an applied event of the lifecycle: a call (`action_id`) or the model's
    decision on turn `turn`. Exactly one is given; the reducer checks the claim."""

    action_id: NonEmpty | None = None
    turn: Annotated[int, Field(ge=1)] | None = None

    @model_validator(mode="after")
    def _one(self) -> EmittedBy:
        if (self.action_id is None) == (self.turn is None):
            raise ValueError("'emitted_by' names exactly one of 'action_id' and 'turn'")
        return self

    def __str__(self) -> str:
        return f"call '{self.action_id}'" if self.action_id is not None else f"turn {self.turn}"


class ErrorInfo(_Part):
    """What went wrong: a machine-readable kind, a message, and whether a retry may help."""

    kind: NonEmpty
    message: Text
    retryable: bool = False


class _Envelope(BaseModel):
    """What every event carries: run, sequence, type, time (and optionally an id)."""

    model_config = _STRICT

    run_id: NonEmpty
    sequence: Annotated[int, Field(ge=1)]
    type: str
    occurred_at: Timestamp
    event_id: NonEmpty | None = None


class RunStarted(_Envelope):
    """The run begins."""

    type: Literal["run.started"] = "run.started"
    objective: Text | None = None
    agent: NonEmpty | None = None
    limits: Limits | None = None
    table: TableRef | None = None


class ModelStarted(_Envelope):
    """A model call begins: a new turn. It may reserve its estimated usage."""

    type: Literal["model.started"] = "model.started"
    reserved_tokens: NonNegInt | None = None
    reserved_cost: NonNegFloat | None = None


class ModelCompleted(_Envelope):
    """A model call returned a decision: a final answer, tool calls, a handoff, or an event
    of the run's lifecycle it proposes (`emit`, with the event in `emit`); or a decision the
    run refused (`refused`, with its `refusal`: nothing of it runs, and the call's usage
    counts all the same)."""

    type: Literal["model.completed"] = "model.completed"
    decision: Literal["final", "tool_calls", "handoff", "emit", "refused"]
    output: Json = None
    tool_calls: list[ToolCall] | None = None
    usage: Usage | None = None
    refusal: Refusal | None = None
    emit: ProposedEvent | None = None

    @model_validator(mode="after")
    def _calls_match_decision(self) -> ModelCompleted:
        # The fields read from the instance's dict, once each: an attribute of a model is
        # read through pydantic's `__getattr__` hook (~250 instructions a read).
        fields = self.__dict__
        decision, refusal, emit = fields["decision"], fields["refusal"], fields["emit"]
        tool_calls: list[ToolCall] | None = fields["tool_calls"]
        if (decision == "refused") != (refusal is not None):
            raise ValueError(
                "decision 'refused' needs a 'refusal'"
                if refusal is None
                else f"decision '{decision}' cannot carry a 'refusal'"
            )
        if (decision == "emit") != (emit is not None):
            raise ValueError(
                "decision 'emit' needs an 'emit'"
                if emit is None
                else f"decision '{decision}' cannot carry an 'emit'"
            )
        if decision == "tool_calls":
            if not tool_calls:
                raise ValueError("decision 'tool_calls' needs a non-empty 'tool_calls' list")
            # Counted once, not `ids.count` per id: a decision of 3,000 calls took 0.2 s
            # to parse that way, on every load of the run.
            # A set first: a Counter cost a fifth of validating a decision of a few calls.
            ids = [c.__dict__["action_id"] for c in tool_calls]
            if len(set(ids)) != len(ids):
                counts = Counter(ids)
                dup = sorted(i for i, n in counts.items() if n > 1)
                raise ValueError(f"'tool_calls' repeats action_id {', '.join(map(repr, dup))}")
        elif tool_calls:
            raise ValueError(f"decision '{decision}' cannot carry 'tool_calls'")
        return self


class ModelFailed(_Envelope):
    """A model call's attempt failed without an answer: the call it started ends here.

    An SDK's HTTP client retries a failed request (an error status, a timeout, a lost
    connection) inside what the SDK sees as one model call; each attempt is recorded as a
    model call of its own, so the guards judge every one before it is sent: this event ends
    the attempt (its reservation is released, its `usage` counted if it reported any), and
    the next attempt is a `model.started`. On no table's edges: the reducer applies it in
    every state that has not ended, to an open model call, and the run stays where it is.
    """

    type: Literal["model.failed"] = "model.failed"
    error: ErrorInfo
    usage: Usage | None = None


class Handoff(_Envelope):
    """The current agent changes; turns and budgets carry on."""

    type: Literal["handoff"] = "handoff"
    to_agent: NonEmpty


class ToolRequested(_Envelope):
    """An action is about to be executed. Durable before the tool runs."""

    type: Literal["tool.requested"] = "tool.requested"
    action_id: NonEmpty
    tool: NonEmpty
    arguments: Arguments
    idempotency_key: NonEmpty | None = None


class ToolStarted(_Envelope):
    """An attempt of an action starts (attempt 1, or a retry after a retryable failure)."""

    type: Literal["tool.started"] = "tool.started"
    action_id: NonEmpty
    attempt: Annotated[int, Field(ge=1)] = 1


class ToolCompleted(_Envelope):
    """An action succeeded; it may propose an event of the run's lifecycle (`emit`), judged
    once its batch is resolved."""

    type: Literal["tool.completed"] = "tool.completed"
    action_id: NonEmpty
    result: Json = None
    cost: NonNegFloat | None = None
    emit: ProposedEvent | None = None


class ToolFailed(_Envelope):
    """An attempt of an action failed; `error.retryable` says whether it may be retried."""

    type: Literal["tool.failed"] = "tool.failed"
    action_id: NonEmpty
    error: ErrorInfo


class ToolOutcomeUnknown(_Envelope):
    """Nobody knows whether the action took effect (timeout, crash): never "failed"."""

    type: Literal["tool.outcome_unknown"] = "tool.outcome_unknown"
    action_id: NonEmpty
    reason: Text | None = None


class ApprovalRequested(_Envelope):
    """A proposed call waits for a human decision."""

    type: Literal["approval.requested"] = "approval.requested"
    action_id: NonEmpty
    tool: NonEmpty
    arguments: Arguments
    expires_at: Timestamp | None = None


class ApprovalAccepted(_Envelope):
    """A human approved exactly the requested call.

    `arguments_digest` (`call_digest` of the tool and arguments the approver saw) binds the
    decision to that call: the reducer refuses it for any other. Optional on the wire, so
    older logs stay valid; agentfsm's own writers always set it. `reason` is why the approver
    let the call run, kept on the action for whoever audits it.
    """

    type: Literal["approval.accepted"] = "approval.accepted"
    action_id: NonEmpty
    approver: NonEmpty | None = None
    arguments_digest: Digest | None = None
    reason: Text | None = None


class ApprovalRejected(_Envelope):
    """A human (or a policy) refused the call; it will not run (bound like an acceptance)."""

    type: Literal["approval.rejected"] = "approval.rejected"
    action_id: NonEmpty
    approver: NonEmpty | None = None
    reason: Text | None = None
    arguments_digest: Digest | None = None


class RunPaused(_Envelope):
    """The run waits for something other than approval."""

    type: Literal["run.paused"] = "run.paused"
    reason: Text


class RunResumed(_Envelope):
    """The run goes on after a pause."""

    type: Literal["run.resumed"] = "run.resumed"


class RunCancelRequested(_Envelope):
    """Cancellation is accepted; in-flight actions settle before `run.cancelled`."""

    type: Literal["run.cancel_requested"] = "run.cancel_requested"
    reason: Text | None = None
    requested_by: NonEmpty | None = None


class RunCancelled(_Envelope):
    """The run stopped on request and nothing is in flight."""

    type: Literal["run.cancelled"] = "run.cancelled"


class RunCompleted(_Envelope):
    """The runtime accepted the model's final output."""

    type: Literal["run.completed"] = "run.completed"


class RunFailed(_Envelope):
    """The run cannot go on by its current path."""

    type: Literal["run.failed"] = "run.failed"
    error: ErrorInfo


class RunTerminated(_Envelope):
    """A guard stopped the run, for an explicit reason."""

    type: Literal["run.terminated"] = "run.terminated"
    stop_reason: NonEmpty
    detail: Text | None = None


class EmitRefused(_Envelope):
    """The event a succeeded call proposed (or tried to) is not applied, and why.

    On no table's edges: the reducer applies it in every state that has not ended, and the
    run stays where it is (`Action.refusal` keeps it; the model reads it with the call's
    result on its next turn).
    """

    type: Literal["emit.refused"] = "emit.refused"
    action_id: NonEmpty
    refusal: Refusal


class RunMigrated(_Envelope):
    """The run moves to another version of its table; every later event is checked against it.

    Legal only while the run has not ended, when `from_table` is the table the run is under,
    and when the run's state is in `to_table` (and does not end the run there). The state,
    the ledger and everything else recorded stay as they were: only the rules change.
    """

    type: Literal["run.migrated"] = "run.migrated"
    from_table: TableRef
    to_table: TableRef
    by: NonEmpty
    reason: NonEmpty


class RunForked(_Envelope):
    """The run was forked from another: the events before this one are `from_run`'s first
    `from_sequence`, re-addressed to this run (`agentfsm.runtime.control.fork`).

    On no table's edges, like `emit.refused`: applied in every state that has not ended, and
    the run stays where its copied events left it. A fork of a fork holds both: the record's
    `forked_from` and `forked_at` are the latest.
    """

    type: Literal["run.forked"] = "run.forked"
    from_run: NonEmpty
    from_sequence: int = Field(ge=1)
    by: NonEmpty | None = None
    reason: NonEmpty | None = None


class UsageReported(_Envelope):
    """Spending an SDK reported for the run that its model calls in the log do not hold:
    added to the run's usage, as a model call's is.

    An SDK that reports its cost (or tokens) for a stretch of the run rather than per call
    (the Claude Agent SDK's `total_cost_usd`, at the end of each leg of the CLI: a pause, a
    stop, the end) has the figure's excess over the record appended as soon as it is
    reported, so the record's usage is the SDK's at every moment the run can be observed.
    `source` says who reported it. On no table's edges, like `emit.refused`: applied in
    every state that has not ended, and the run stays where it is. Budgets count it like a
    model call's usage: a report past a limit stops the run (`budget`).
    """

    type: Literal["usage.reported"] = "usage.reported"
    usage: Usage
    source: Text | None = None


#: The base of every event model, built-in or a lifecycle's own.
Envelope = _Envelope


class CustomEvent(_Envelope):
    """The base of a lifecycle's own event types (see `agentfsm.events.vocabulary`).

    Subclass it with `type: Literal["your.event"] = "your.event"` and typed fields; the
    fields are strict, closed and frozen like the built-in events', and their values meet
    the same limits (`agentfsm.events._bounds`). Override `fold` to record fields on the run
    record's `custom` mapping when the event is applied.

    `emitted_by` is envelope: set by the runtime on an event a call or a decision proposed
    (see `ProposedEvent`), absent on one a person appended.
    """

    emitted_by: EmittedBy | None = None

    @model_validator(mode="before")
    @classmethod
    def _within_bounds(cls, data: Any, info: ValidationInfo) -> Any:
        # The built-in models bound their JSON values field by field; a user's fields are
        # checked here, whatever their types, so a custom event is stored and read back
        # under the same limits.
        if isinstance(data, dict):
            check = check_parsed_value if info.context is PARSED_TEXT else check_json_value
            for key, value in data.items():
                if key not in _STAMPED_FIELDS:
                    try:
                        check(value)
                    except ValueError as exc:
                        raise ValueError(f"field '{key}': {exc}") from None
        return data

    def fold(self, custom: Mapping[str, Any]) -> Mapping[str, Any]:
        """The run record's `custom` mapping after this event (unchanged by default).

        Must be pure: the same event and mapping give the same result, every time.
        """
        return custom


#: Any one event of a run's log: the union of the built-in models, told apart by `type`.
Event = Annotated[
    RunStarted
    | ModelStarted
    | ModelCompleted
    | ModelFailed
    | Handoff
    | ToolRequested
    | ToolStarted
    | ToolCompleted
    | ToolFailed
    | ToolOutcomeUnknown
    | ApprovalRequested
    | ApprovalAccepted
    | ApprovalRejected
    | RunPaused
    | RunResumed
    | RunCancelRequested
    | RunCancelled
    | RunCompleted
    | RunFailed
    | RunTerminated
    | EmitRefused
    | RunForked
    | RunMigrated
    | UsageReported,
    Field(discriminator="type"),
]

#: Validates any event (a dict, or JSON text with `validate_json`).
EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)

#: Event type name -> its model class.
EVENT_CLASSES: dict[str, type[_Envelope]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        RunStarted,
        ModelStarted,
        ModelCompleted,
        ModelFailed,
        Handoff,
        ToolRequested,
        ToolStarted,
        ToolCompleted,
        ToolFailed,
        ToolOutcomeUnknown,
        ApprovalRequested,
        ApprovalAccepted,
        ApprovalRejected,
        RunPaused,
        RunResumed,
        RunCancelRequested,
        RunCancelled,
        RunCompleted,
        RunFailed,
        RunTerminated,
        EmitRefused,
        RunForked,
        RunMigrated,
        UsageReported,
    )
}
