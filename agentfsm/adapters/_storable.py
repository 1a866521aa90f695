"""What comes from an SDK, made JSON a log can hold and read back.

Every adapter's values pass here before they are appended: `jsonable` turns an SDK's
objects into JSON data, `parse_arguments` a tool call's arguments into a dict, and
`storable` replaces what JSON can express but a log cannot keep (NaN, lone surrogates,
nesting past the limit, oversize values) by a record of what it was.
"""

from __future__ import annotations

import json
from typing import Any

from agentfsm._log import get_logger
from agentfsm.events import models as m
from agentfsm.events._bounds import unstorable
from agentfsm.runtime._writer import Spec

__all__ = ["jsonable", "parse_arguments", "storable"]


def jsonable(value: Any) -> Any:
    """`value` as JSON data: itself when it already is, else its JSON through `str`.

    Never raises: a value nested too deep for the encoder becomes a sentence saying so. What
    is JSON but cannot be stored (NaN, lone surrogates) is left for `storable` to record.
    """
    try:
        return json.loads(json.dumps(value, default=str))
    except (TypeError, ValueError, RecursionError):
        try:
            return str(value)
        except Exception:  # noqa: BLE001  (a str() that fails says nothing worth keeping)
            return f"<a {type(value).__name__} that cannot be written as JSON>"


_log = get_logger("agentfsm.adapters")


def storable(spec: Spec) -> Spec:
    """The spec, with what came from the SDK made something a log can hold and read back.

    A tool's result that cannot be stored (NaN, a lone surrogate, nesting past the limit,
    8 MiB...) makes the call `tool.failed` with the reason: it ran, its result is not in the
    log. A model answer that cannot be stored is recorded without it. Arguments that cannot
    be stored are replaced, the same way wherever the call appears (so its digest still
    binds the proposal, the approval and the request), by `{"_unstorable": reason}`.
    """
    cls, fields = spec.cls, spec.fields
    if cls is m.ToolCompleted:
        reason = unstorable(fields.get("result"))
        if reason is not None:
            message = f"the tool ran, but its result cannot be stored: {reason}"
            error = {"kind": "unstorable_result", "message": message, "retryable": False}
            return Spec(m.ToolFailed, {"action_id": fields["action_id"], "error": error})
    elif cls is m.ModelCompleted:
        fields = dict(fields)
        reason = unstorable(fields.get("output"))
        if reason is not None:
            _log.warning("model.output_unstorable", reason=reason)
            fields["output"] = None
        if fields.get("tool_calls"):
            fields["tool_calls"] = [
                {**c, "arguments": _storable_arguments(c["arguments"])}
                for c in fields["tool_calls"]
            ]
        return Spec(cls, fields)
    elif cls is m.ToolRequested or cls is m.ApprovalRequested:
        return Spec(cls, {**fields, "arguments": _storable_arguments(fields["arguments"])})
    return spec


def _storable_arguments(arguments: Any) -> Any:
    reason = unstorable(arguments)
    return arguments if reason is None else {"_unstorable": reason}


def parse_arguments(raw: str | dict[str, Any] | None) -> dict[str, Any]:
    """A tool call's arguments as a dict; text that is not a JSON object is kept as `_raw`."""
    if isinstance(raw, dict):
        return jsonable(raw)  # type: ignore[no-any-return]
    if not raw:
        return {}
    try:
        parsed = json.loads(raw)
    except ValueError:
        return {"_raw": raw}
    return parsed if isinstance(parsed, dict) else {"_raw": raw}
