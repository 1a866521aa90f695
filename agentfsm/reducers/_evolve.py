"""Fast construction and copy-with-changes for the reducer's frozen records.

The reducer builds one `RunRecord` (24 fields) and often one `Action` (13) per event. How
they are built decides most of its cost. Measured with callgrind (instructions per record of
24 fields, CPython 3.11): `attrs.evolve` ~70k; the frozen class's own `__init__` ~30k,
because every field goes through `object.__setattr__` by name; filling slots through their
member descriptors ~18k; plain attribute stores on a *mutable* slotted class, then switching
the instance's `__class__` to the frozen subclass, ~5k.

So each record class is declared as a private mutable base that owns the slots
(`_RunRecordSlots`, `attrs.define`) and the public frozen class on top of it, which adds no
slots of its own (`RunRecord`, `attrs.frozen`). The functions made here fill a new base
instance with stores the interpreter specialises, then give it the frozen class; the result
is an ordinary `RunRecord` — equal, hashable, printable and immutable like one built by
`__init__` (the tests check this). Only the reducer uses them, with values it trusts: they
skip defaults, validators and converters, so classes with validators are refused.

Every field is passed by keyword, never by position: a record of 24 fields changed with eight
positional values (`None, None, None, ...`) fails silently when two are swapped. The reducer
declares each change as a typed stub (`@evolves(RunRecord) def _set_pause(r, /, *, status:
str, ...)`), so mypy checks every call's names and types, and the generated function refuses
a wrong or missing name at runtime. Keywords cost about 3% of the reducer's throughput
(CPython 3.11 matches them by identity against the code object's interned names): measured
in one process, positional and keyword reducers interleaved over the `make bench` corpus,
422k vs 409k events a second (median of 9 rounds, CPU time). Worth it for calls that can no
longer be silently wrong.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

# The generated code's own names; a field of the same name would shadow one of them.
_RESERVED = frozenset({"_r", "_n", "_new", "_base", "_cls"})


def _storage(cls: type[Any]) -> tuple[type[Any], list[str]]:
    """The mutable base that owns `cls`'s slots, and the field names in order."""
    fields = attrs.fields(cls)
    if any(f.validator or f.converter for f in fields) or hasattr(cls, "__attrs_post_init__"):
        raise TypeError(f"{cls.__name__} validates or converts on init; use attrs.evolve")
    base = cls.__mro__[1]
    names = [f.name for f in fields]
    own = [s for s in cls.__dict__.get("__slots__", ()) if s != "__weakref__"]
    if own or not attrs.has(base) or [f.name for f in attrs.fields(base)] != names:
        raise TypeError(
            f"{cls.__name__} must add no fields to a mutable attrs base that declares them all"
        )
    clash = sorted(_RESERVED.intersection(names))
    if clash:
        raise TypeError(f"{cls.__name__} has fields named like the generated code's: {clash}")
    return base, names


def _compile(source: str, filename: str, cls: type[Any], base: type[Any], name: str) -> Any:
    namespace: dict[str, Any] = {"_new": object.__new__, "_base": base, "_cls": cls}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - built from attrs field names
    return namespace[name]


def maker(cls: type[T]) -> Callable[..., T]:
    """A function `(*, field=value, ...) -> instance` taking every field by keyword."""
    base, names = _storage(cls)
    body = "".join(f"    _n.{name} = {name}\n" for name in names)
    source = (
        f"def make(*, {', '.join(names)}):\n"
        f"    _n = _new(_base)\n{body}    _n.__class__ = _cls\n    return _n\n"
    )
    fn: Callable[..., T] = _compile(source, f"<maker {cls.__name__}>", cls, base, "make")
    return fn


def evolver(cls: type[T], *changed: str) -> Callable[..., T]:
    """A function `(instance, /, *, field=value, ...) -> copy` replacing the `changed` fields."""
    base, names = _storage(cls)
    unknown = [c for c in changed if c not in names]
    if unknown:
        raise ValueError(f"{cls.__name__} has no fields {unknown}")
    if len(set(changed)) != len(changed):
        raise ValueError(f"fields repeated in {changed}")
    body = "".join(
        f"    _n.{name} = {name if name in changed else '_r.' + name}\n" for name in names
    )
    source = (
        f"def evolve(_r, /, *, {', '.join(changed)}):\n"
        f"    _n = _new(_base)\n{body}    _n.__class__ = _cls\n    return _n\n"
    )
    fn: Callable[..., T] = _compile(
        source, f"<evolver {cls.__name__}: {', '.join(changed)}>", cls, base, "evolve"
    )
    return fn


def _declared(cls: type[Any], stub: Callable[..., Any], positional: int) -> list[str]:
    """The keyword-only fields a stub declares, checked against `cls`'s fields and types."""
    params = list(inspect.signature(stub).parameters.values())
    leading, keywords = params[:positional], params[positional:]
    kinds = [p.kind for p in leading] == [inspect.Parameter.POSITIONAL_ONLY] * positional
    if not kinds or any(p.kind is not inspect.Parameter.KEYWORD_ONLY for p in keywords):
        shape = "(record, /, *, field: type, ...)" if positional else "(*, field: type, ...)"
        raise TypeError(f"{stub.__name__} must be declared as {shape}")
    types = {f.name: f.type for f in attrs.fields(cls)}
    for p in keywords:
        if p.name not in types:
            raise ValueError(f"{stub.__name__}: {cls.__name__} has no field '{p.name}'")
        # Both sides are the source text of the annotation (postponed evaluation), so a stub
        # that declares another type than the field's is caught here, at import.
        if p.annotation != types[p.name]:
            raise TypeError(
                f"{stub.__name__}: field '{p.name}' is {types[p.name]!r}, declared {p.annotation!r}"
            )
    return [p.name for p in keywords]


def evolves(cls: type[Any]) -> Callable[[F], F]:
    """Turn a typed stub `def name(r: Cls, /, *, field: type, ...) -> Cls: ...` into an evolver.

    The stub's signature is what mypy checks each call against; its body is never run.
    """

    def build(stub: F) -> F:
        fn: F = evolver(cls, *_declared(cls, stub, 1))  # type: ignore[assignment]
        fn.__name__ = fn.__qualname__ = stub.__name__
        return fn

    return build


def makes(cls: type[Any]) -> Callable[[F], F]:
    """Turn a typed stub `def name(*, every field: type) -> Cls: ...` into a maker."""

    def build(stub: F) -> F:
        declared = _declared(cls, stub, 0)
        missing = [f.name for f in attrs.fields(cls) if f.name not in declared]
        if missing:
            raise ValueError(f"{stub.__name__}: a maker takes every field; missing {missing}")
        fn: F = maker(cls)  # type: ignore[assignment]
        fn.__name__ = fn.__qualname__ = stub.__name__
        return fn

    return build
