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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

T = TypeVar("T")


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
    return base, names


def _compile(source: str, filename: str, namespace: dict[str, Any], name: str) -> Any:
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - built from attrs field names
    return namespace[name]


def maker(cls: type[T]) -> Callable[..., T]:
    """A function `(*values) -> instance` taking every field positionally, no defaults."""
    base, names = _storage(cls)
    body = "".join(f"    n.{name} = _{name}\n" for name in names)
    source = (
        f"def make({', '.join('_' + n for n in names)}):\n"
        f"    n = new(base)\n{body}    n.__class__ = cls\n    return n\n"
    )
    namespace: dict[str, Any] = {"new": object.__new__, "base": base, "cls": cls}
    fn: Callable[..., T] = _compile(source, f"<maker {cls.__name__}>", namespace, "make")
    return fn


def evolver(cls: type[T], *changed: str) -> Callable[..., T]:
    """A function `(instance, *new_values) -> copy` replacing `changed` fields in order."""
    base, names = _storage(cls)
    unknown = [c for c in changed if c not in names]
    if unknown:
        raise ValueError(f"{cls.__name__} has no fields {unknown}")
    if len(set(changed)) != len(changed):
        raise ValueError(f"fields repeated in {changed}")
    body = "".join(
        f"    n.{name} = {'_' + name if name in changed else 'r.' + name}\n" for name in names
    )
    source = (
        f"def evolve(r, {', '.join('_' + c for c in changed)}):\n"
        f"    n = new(base)\n{body}    n.__class__ = cls\n    return n\n"
    )
    namespace: dict[str, Any] = {"new": object.__new__, "base": base, "cls": cls}
    fn: Callable[..., T] = _compile(
        source, f"<evolver {cls.__name__}: {', '.join(changed)}>", namespace, "evolve"
    )
    return fn
