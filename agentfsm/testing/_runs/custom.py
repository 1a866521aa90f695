"""Payloads of a table's own event types, read from their models' annotations.

A `CustomEvent` subclass declares its fields with types (`priority: Literal["normal",
"urgent"] = "normal"`, `escalated_to: str`). From those the kit builds two things:

- `variants(cls)`: a few fixed payloads, the plainest first and then one per other value of
  every field with few values (a `Literal`, a `bool`, an `Enum`). They are deterministic, so
  the walk and `edge_covering_paths` can try each and keep the ones the table accepts;
  a condition on such a field is met by one of them.
- `payload_strategy(cls, fields)`: a Hypothesis strategy of payloads, each field drawn from
  the strategy you give for its name, else from its annotation.
"""

from __future__ import annotations

import enum
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal

from hypothesis import strategies as st

from agentfsm.events.models import Envelope

__all__ = ["few_values", "own_fields", "payload_strategy", "variants"]

#: Fields every event has; a payload never sets them.
# `emitted_by` is envelope too: set by the runtime on an event a call or a decision proposed,
# never a payload to vary (a generated run's lifecycle events are a person's).
_ENVELOPE = frozenset({"run_id", "sequence", "type", "occurred_at", "event_id", "emitted_by"})

#: A plain value for a required field of these types, when no strategy is given.
_PLAIN: dict[Any, Any] = {str: "x", int: 0, float: 0.0, bool: False}


def own_fields(cls: type[Envelope]) -> dict[str, Any]:
    """The model's fields outside the envelope: name -> pydantic `FieldInfo`."""
    return {n: f for n, f in cls.model_fields.items() if n not in _ENVELOPE}


def _unwrap(annotation: Any) -> Any:
    # `Annotated[str, ...]` and `X | None` carry their useful type inside.
    if typing.get_origin(annotation) is typing.Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            return _unwrap(inner[0])
    return annotation


def few_values(annotation: Any) -> tuple[Any, ...] | None:
    """Every value of a type that has few (`Literal`, `bool`, an `Enum`), else None."""
    inner = _unwrap(annotation)
    if typing.get_origin(inner) is Literal:
        return typing.get_args(inner)
    if inner is bool:
        return (False, True)
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return tuple(m.value for m in inner)
    return None


def _plain(annotation: Any) -> tuple[bool, Any]:
    inner = _unwrap(annotation)
    values = few_values(inner)
    if values:
        return True, values[0]
    if inner in _PLAIN:
        return True, _PLAIN[inner]
    origin = typing.get_origin(inner)
    if origin in (list, tuple, set, frozenset) or inner in (list, tuple):
        # One plain item: a list of ids usually must not be empty (`min_length=1`).
        args = [a for a in typing.get_args(inner) if a is not Ellipsis]
        if not args:
            return True, []
        known, item = _plain(args[0])
        return (True, [item]) if known else (False, None)
    if origin is dict or inner is dict:
        return True, {}
    return False, None


def variants(cls: type[Envelope]) -> list[dict[str, Any]]:
    """Fixed payloads of `cls` (see `_variants`), as fresh dicts."""
    return [dict(v) for v in _variants(cls)]


@functools.lru_cache(maxsize=512)
def _variants(cls: type[Envelope]) -> tuple[dict[str, Any], ...]:
    """Fixed payloads of `cls`: the plainest, then one per other value of a few-valued field.

    The plainest leaves out every field with a default and gives each required one a plain
    value; a required field of a type with no plain value (a nested model, a list) leaves
    no fixed payload at all, and the drawn ones (`payload_strategy`) must do.
    """
    base: dict[str, Any] = {}
    for name, info in own_fields(cls).items():
        if info.is_required():
            known, value = _plain(info.annotation)
            if not known:
                return ()
            base[name] = value
    out = [base]
    for name, info in own_fields(cls).items():
        values = few_values(info.annotation) or ()
        first = base.get(name, info.default)
        out.extend({**base, name: v} for v in values if v != first)
    # Cached: the searches ask for them on every record they expand.
    return tuple(out)


def _strategy_of(annotation: Any) -> st.SearchStrategy[Any]:
    inner = _unwrap(annotation)
    values = few_values(inner)
    if values:
        return st.sampled_from(values)
    if inner is str:
        # Short printable text: it shrinks to "" and stays within every value limit.
        return st.text(st.characters(codec="utf-8"), max_size=8)
    if inner is int:
        return st.integers(-1_000, 1_000)
    if inner is float:
        return st.floats(-1_000, 1_000, allow_nan=False, allow_infinity=False)
    return st.from_type(inner)


def payload_strategy(
    cls: type[Envelope], fields: Mapping[str, st.SearchStrategy[Any]] | None = None
) -> st.SearchStrategy[dict[str, Any]]:
    """Payloads of `cls`: each field from `fields[name]` if given, else from its annotation.

    Fields with a default are sometimes left out, so the default is exercised too.
    """
    given = fields or {}
    required: dict[str, st.SearchStrategy[Any]] = {}
    optional: dict[str, st.SearchStrategy[Any]] = {}
    for name, info in own_fields(cls).items():
        strategy = given[name] if name in given else _strategy_of(info.annotation)
        (required if info.is_required() else optional)[name] = strategy
    return st.fixed_dictionaries(required, optional=optional)
