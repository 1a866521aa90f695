"""Tools: a name, a callable, argument validation, and what is safe to repeat.

A tool is called with one `ToolContext`: the validated arguments, the idempotency key
(`run_id:action_id`, the same on every attempt and after a crash), the attempt number and
the time left before the run's deadline. It returns any JSON value (or a `ToolResult` to
report a cost), raises `ToolError` for a failure it understands (with `retryable`), or
raises `OutcomeUnknownError` when it cannot tell whether its effect happened.

A tool may also propose one event of the run's own lifecycle with its result: it returns
`Emit("loan.documents_requested", documents=[...])`, or `ToolResult(value, emit=Emit(...))`,
for a type it declares (`Tool(..., emits=("loan.documents_requested",))`). The proposal is
recorded with the call's outcome; the table decides once the batch is resolved (see
`agentfsm.runtime._emits`).

What the Runner may repeat follows from two flags:

- `side_effects=False`: calling it again changes nothing in the world (a lookup).
- `idempotent=True`: it has effects, but honours its idempotency key: a second call with
  the same key does not act twice (it returns the first call's result).

A tool with either may be retried after a `retryable` failure and re-executed after a crash;
any other tool that was started and never reported is recorded `outcome_unknown`, never run
again behind anyone's back.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import attrs
from pydantic import BaseModel, ValidationError

from agentfsm._extras import missing_extra

__all__ = [
    "Emit",
    "InvalidCall",
    "Tool",
    "ToolContext",
    "ToolRegistry",
    "ToolResult",
]


@attrs.frozen
class ToolContext:
    """What a tool is called with.

    Attributes:
        run_id: the run.
        action_id: the action this call is.
        tool: the tool's name.
        arguments: the arguments as proposed (a JSON object).
        args: the validated arguments: an instance of the tool's pydantic model, or the
            arguments dict when the tool validates with a JSON Schema or not at all.
        idempotency_key: `run_id:action_id`; pass it to the system you call, so a repeat
            does not act twice.
        attempt: 1 for the first attempt, +1 per retry (a re-execution after a crash keeps
            the attempt it interrupted).
        remaining: seconds before the run's deadline, or None without one.
        timeout: the tool's own timeout capped to `remaining` (None: no limit).
    """

    run_id: str
    action_id: str
    tool: str
    arguments: Mapping[str, Any]
    args: Any
    idempotency_key: str
    attempt: int
    remaining: float | None
    timeout: float | None


@attrs.frozen(init=False)
class Emit:
    """An event of the run's own lifecycle, proposed by a tool's call or a model's decision.

    `Emit("loan.documents_requested", documents=["payslip"])`: the event type (one of the
    table's own, never a built-in one) and its fields. A tool returns it (alone, or as
    `ToolResult(value, emit=...)`); a model decides `Decision.emit(Emit(...))`. The table
    decides: the event is appended when it is legal where the run stands, and otherwise
    recorded as refused, with why and what was allowed, for the model's next turn.

    Attributes:
        type: the event type, e.g. `loan.documents_requested`.
        fields: its own fields (JSON values), checked against the type's model.
    """

    type: str
    fields: Mapping[str, Any]

    def __init__(self, type: str, /, **fields: Any) -> None:
        if not isinstance(type, str) or not type:
            raise ValueError(f"an Emit needs an event type (a non-empty string), got {type!r}")
        self.__attrs_init__(type, dict(fields))


@attrs.frozen
class ToolResult:
    """A tool's result, with what it cost and the event it proposes (on `tool.completed`).

    Attributes:
        value: the result (a JSON value).
        cost: what the call cost, counted against the run's budget.
        emit: one event the call proposes (a type the tool declares in `emits`).
    """

    value: Any
    cost: float | None = None
    emit: Emit | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if self.emit is not None and not isinstance(self.emit, Emit):
            raise TypeError(f"ToolResult.emit is an Emit, got {self.emit!r}")


@attrs.frozen
class InvalidCall:
    """Why a proposed call cannot run: fed back to the model as a `tool.failed` error.

    Attributes:
        kind: `unknown_tool` or `invalid_arguments`.
        message: what is wrong, in a sentence the model can act on.
    """

    kind: str
    message: str


def _check_name(_: object, __: object, value: str) -> None:
    if not value:
        raise ValueError("a tool needs a non-empty name")


def _check_attempts(_: object, __: object, value: int) -> None:
    if value.__class__ is not int or value < 1:
        raise ValueError(f"max_attempts must be an integer >= 1, got {value!r}")


def _check_args(_: object, __: object, value: Any) -> None:
    if value is None or isinstance(value, Mapping):
        return
    if isinstance(value, type) and issubclass(value, BaseModel):
        return
    raise TypeError(f"args must be a pydantic model class or a JSON Schema dict, got {value!r}")


def _emit_types(value: str | Iterable[str]) -> tuple[str, ...]:
    types = (value,) if isinstance(value, str) else tuple(value)
    bad = [t for t in types if not isinstance(t, str) or not t]
    if bad:
        raise ValueError(f"emits names event types (non-empty strings), got {bad!r}")
    return types


def _schema_validator(schema: Mapping[str, Any]) -> Any:
    try:
        import jsonschema
    except ImportError as exc:
        hint = "or describe the arguments with a pydantic model"
        raise missing_extra("a Tool with a JSON Schema", "jsonschema", exc, hint) from exc
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _where(path: Iterable[Any]) -> str:
    parts = [str(p) for p in path]
    return "/".join(parts) if parts else "(root)"


@attrs.frozen
class Tool:
    """A tool the model may call.

    Attributes:
        name: what the model calls it.
        fn: called with a `ToolContext`; may be a coroutine function under `AsyncRunner`
            (a plain function there runs on a worker thread).
        args: a pydantic model class (its validation, strict or not, is the tool's), or
            a JSON Schema dict (needs the `jsonschema` extra), or None (any object).
        side_effects: calling it changes something in the world (True unless told).
        idempotent: it honours its idempotency key, so repeating it is safe.
        polling: it polls for a changing state: the loop detector lets it repeat while the
            result changes, and `poll_limit` times with an unchanged one.
        poll_limit: see `polling`.
        concurrency_key: calls sharing a key never overlap (`AsyncRunner`), e.g. one per
            account; None runs freely.
        max_attempts: attempts per action, retries included (retried only when the error is
            retryable and the tool is safe to repeat).
        timeout: seconds one attempt may take (capped to the run's deadline). Both runners
            enforce it (the sync `Runner` runs such a tool on a worker thread): a call that
            overruns is recorded outcome unknown, or a retryable `timeout` for a tool
            without side effects; Python cannot stop it, so it finishes in the background.
        description: for the model's tool list.
        emits: the event types of the run's table its calls may propose (`Emit`): a call
            that proposes another is refused (`undeclared`), and a Runner refuses a tool
            that declares a type its table does not have.

    A tool knows nothing of agents: one whose call is a child run is a `SubagentTool`
    (see `subagent(...)`), so agents can hold tools without tools importing agents.
    """

    name: str = attrs.field(validator=_check_name)
    fn: Callable[[ToolContext], Any]
    args: type[BaseModel] | Mapping[str, Any] | None = attrs.field(
        default=None, validator=_check_args
    )
    side_effects: bool = True
    idempotent: bool = False
    polling: bool = False
    poll_limit: int = 5
    concurrency_key: str | None = None
    max_attempts: int = attrs.field(default=1, validator=_check_attempts)
    timeout: float | None = None
    description: str = ""
    emits: tuple[str, ...] = attrs.field(default=(), converter=_emit_types)
    _validator: Any = attrs.field(init=False, repr=False, eq=False)
    is_async: bool = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        validator = (
            _schema_validator(self.args) if isinstance(self.args, Mapping) else None
        )  # checks the schema itself now, not at the first call
        object.__setattr__(self, "_validator", validator)
        fn = self.fn
        is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004  (async callable objects count too)
        )
        object.__setattr__(self, "is_async", is_async)

    @property
    def safe_to_repeat(self) -> bool:
        """No side effects, or idempotent: a retry or re-execution cannot act twice."""
        return not self.side_effects or self.idempotent

    def validate(self, arguments: Mapping[str, Any]) -> Any:
        """The validated arguments (see `ToolContext.args`), or an `InvalidCall`."""
        if self.args is None:
            return dict(arguments)
        if isinstance(self.args, Mapping):
            errors = sorted(
                self._validator.iter_errors(dict(arguments)), key=lambda e: list(e.path)
            )
            if errors:
                problems = "; ".join(f"at {_where(e.path)}: {e.message}" for e in errors)
                return InvalidCall(
                    "invalid_arguments", f"arguments for '{self.name}' are invalid: {problems}"
                )
            return dict(arguments)
        try:
            return self.args.model_validate(dict(arguments))
        except ValidationError as exc:
            problems = "; ".join(
                f"at {_where(e['loc'])}: {e['msg']}"
                for e in exc.errors(include_url=False, include_context=False)
            )
            return InvalidCall(
                "invalid_arguments", f"arguments for '{self.name}' are invalid: {problems}"
            )


class ToolRegistry:
    """The tools an agent may call, by name.

    Args:
        tools: the tools; names must be unique.

    Raises:
        ValueError: two tools share a name.
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        """Register one more tool.

        Raises:
            ValueError: a tool of that name is already registered.
        """
        if tool.name in self._tools:
            raise ValueError(f"a tool named '{tool.name}' is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """The tool called `name`, or None."""
        return self._tools.get(name)

    def __getitem__(self, name: str) -> Tool:
        return self._tools[name]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> tuple[str, ...]:
        """The registered names, sorted."""
        return tuple(sorted(self._tools))

    def check(self, tool: str, arguments: Mapping[str, Any]) -> tuple[Tool, Any] | InvalidCall:
        """The tool and its validated arguments, or why the call cannot run."""
        found = self._tools.get(tool)
        if found is None:
            known = ", ".join(f"'{n}'" for n in self.names) or "none"
            return InvalidCall("unknown_tool", f"there is no tool '{tool}'; tools: {known}")
        args = found.validate(arguments)
        if isinstance(args, InvalidCall):
            return args
        return found, args

    @property
    def polling(self) -> Mapping[str, int]:
        """Polling tools and their poll limits (for `agentfsm.fsm.LoopDetector(polling=...)`)."""
        return {t.name: t.poll_limit for t in self._tools.values() if t.polling}
