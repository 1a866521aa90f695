"""Small text helpers the renderers share: stable ids for arbitrary state names."""

from __future__ import annotations

import re
from collections.abc import Iterable

__all__ = ["IdAllocator"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


class IdAllocator:
    """Gives every name an identifier of `[A-Za-z_][A-Za-z0-9_]*`, unique and stable.

    A name that already is such an identifier (and is not reserved) keeps its spelling, so
    the usual state names read as themselves in the generated text. Others are cleaned and,
    if that collides, numbered. Allocation follows call order, which the renderers keep
    deterministic (the model's order), so the same table always gets the same ids.
    """

    def __init__(self, reserved: Iterable[str] = (), taken: Iterable[str] = ()) -> None:
        self._reserved = {r.lower() for r in reserved}
        self._ids: dict[str, str] = {}
        self._taken: set[str] = set(taken)

    def __call__(self, name: str) -> str:
        """The identifier for `name` (the same one on every call)."""
        found = self._ids.get(name)
        if found is not None:
            return found
        base = _UNSAFE.sub("_", name) or "_"
        if base[0].isdigit():
            base = "_" + base
        candidate = base
        n = 1
        while candidate.lower() in self._reserved or candidate in self._taken:
            n += 1
            candidate = f"{base}_{n}"
        self._ids[name] = candidate
        self._taken.add(candidate)
        return candidate

    def fresh(self, base: str) -> str:
        """A new identifier for a pseudo-node, unlike every id given or to be given to `taken`."""
        candidate = base
        n = 1
        while candidate in self._taken or candidate.lower() in self._reserved:
            n += 1
            candidate = f"{base}_{n}"
        self._taken.add(candidate)
        return candidate

    def is_plain(self, name: str) -> bool:
        """Whether `name`'s identifier is the name itself (so no display alias is needed)."""
        return self(name) == name
