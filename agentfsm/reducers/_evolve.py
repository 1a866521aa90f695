"""Fast copy-with-changes for frozen, slotted attrs classes on the hot path.

`attrs.evolve` inspects the class on every call (about 3 µs for a record of twenty fields),
and even a frozen class's own `__init__` pays for `object.__setattr__` looking each field up
by name. The reducer changes a handful of known fields per event, so it asks once, at import
time, for a function specialised to those fields: `set_status = evolver(RunRecord, "status")`,
then `set_status(record, "running")` allocates the instance and fills each slot through its
descriptor directly. The result is an ordinary instance of the class: equal, hashable and
printable exactly like one built by `__init__` (the tests check this).

Only for classes without validators, converters or `__attrs_post_init__`: the generated
function copies values it trusts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

T = TypeVar("T")


def maker(cls: type[T]) -> Callable[..., T]:
    """A function `(*values) -> instance` taking every field positionally, no defaults."""
    names = _checked_names(cls)
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = ["    n = new(cls)"]
    for i, name in enumerate(names):
        namespace[f"set{i}"] = cls.__dict__[name].__set__  # the slot's member descriptor
        lines.append(f"    set{i}(n, _{name})")
    params = ", ".join(f"_{n}" for n in names)
    source = f"def make({params}):\n" + "\n".join(lines) + "\n    return n\n"
    fn: Callable[..., T] = _compile(source, f"<maker {cls.__name__}>", namespace, "make")
    return fn


def _checked_names(cls: type[Any]) -> list[str]:
    fields = attrs.fields(cls)
    if any(f.validator or f.converter for f in fields) or hasattr(cls, "__attrs_post_init__"):
        raise TypeError(f"{cls.__name__} validates or converts on init; use attrs.evolve")
    return [f.name for f in fields]


def _compile(source: str, filename: str, namespace: dict[str, Any], name: str) -> Any:
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - generated from attrs field names
    return namespace[name]


def evolver(cls: type[T], *changed: str) -> Callable[..., T]:
    """A function `(instance, *new_values) -> copy` replacing `changed` fields in order."""
    names = _checked_names(cls)
    unknown = [c for c in changed if c not in names]
    if unknown:
        raise ValueError(f"{cls.__name__} has no fields {unknown}")
    if len(set(changed)) != len(changed):
        raise ValueError(f"fields repeated in {changed}")
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    lines = ["    n = new(cls)"]
    for i, name in enumerate(names):
        namespace[f"set{i}"] = cls.__dict__[name].__set__  # the slot's member descriptor
        lines.append(f"    set{i}(n, {'_' + name if name in changed else 'r.' + name})")
    params = ", ".join(f"_{c}" for c in changed)
    source = f"def evolve(r, {params}):\n" + "\n".join(lines) + "\n    return n\n"
    fn: Callable[..., T] = _compile(
        source, f"<evolver {cls.__name__}: {', '.join(changed)}>", namespace, "evolve"
    )
    return fn
