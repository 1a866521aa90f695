"""Canonical JSON and digests: one spelling for one value.

Key order, whitespace and the spelling of numbers (`1`, `1.0`, `1e0`) do not change the
canonical form; a different value, or a bool where a number was, does. Approval binding,
loop fingerprints and the stores' hash chain all rest on this.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["canonical_json", "digest"]

_encode = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode


def _normalise(value: Any) -> Any:
    # Integral floats are written as integers so 1.0 and 1 agree; bools are left alone
    # (bool is an int subclass, but True is not the number 1 on the wire).
    if value.__class__ is float:
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    return value


def canonical_json(value: Any) -> str:
    """The canonical JSON text of a JSON-able value."""
    return _encode(_normalise(value))


def digest(value: Any) -> str:
    """`sha256:` and the hex digest of the canonical JSON of `value`."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode()).hexdigest()
