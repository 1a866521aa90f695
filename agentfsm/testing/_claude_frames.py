"""The `claude` CLI's JSON frames, as the scripted CLI sends them: builders, no I/O, no state.

Split from `claude_transport` where what the CLI *says* parts from what it *does*: the
`ScriptedCLI` there decides when to send what (the order, the hooks, the tool calls, the
session), these functions only shape each frame the way the real CLI does (field for field,
in its order; `tests/adapters/claude_frames.json` keeps a recording a test checks them
against). So a change of the protocol's frames is made here, a change of its flow there.

Frames go on the wire as `Frame`s; a `stream_event` frame wraps an `Event` (the Anthropic
API's streaming event the CLI passes on).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

__all__ = [
    "MODEL",
    "Event",
    "Frame",
    "assistant",
    "block_start",
    "block_stop",
    "can_use_tool",
    "control_request",
    "control_response",
    "hook_callback",
    "hook_input",
    "init",
    "input_delta",
    "interrupted",
    "message_delta",
    "message_start",
    "message_stop",
    "result",
    "stream_event",
    "text_delta",
    "tool_result",
]

#: The model name the scripted CLI reports.
MODEL = "claude-scripted"

#: One frame, either way (a JSON object on its own line).
Frame = dict[str, Any]
#: A streaming event of the model's answer, inside a `stream_event` frame.
Event = dict[str, Any]


# -- the control protocol ---------------------------------------------------------------------


def control_response(request_id: str, response: dict[str, Any]) -> Frame:
    """The CLI's success answer to the SDK's control request `request_id`."""
    return {
        "type": "control_response",
        "response": {"subtype": "success", "request_id": request_id, "response": response},
    }


def control_request(request_id: str, request: dict[str, Any]) -> Frame:
    """A control request of the CLI's to the SDK (a hook callback, `can_use_tool`, ...)."""
    return {"type": "control_request", "request_id": request_id, "request": request}


def hook_input(
    session_id: str, transcript_path: str, cwd: str, event: str, **data: Any
) -> dict[str, Any]:
    """What a hook callback of `event` is given: the session's fields, then `data`."""
    return {
        "session_id": session_id,
        "transcript_path": transcript_path,
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": event,
        **data,
    }


def hook_callback(
    callback_id: str, payload: dict[str, Any], tool_use_id: str | None
) -> dict[str, Any]:
    """A `hook_callback` control request: ask the SDK's hook callback `callback_id`."""
    return {
        "subtype": "hook_callback",
        "callback_id": callback_id,
        "input": payload,
        "tool_use_id": tool_use_id,
    }


def can_use_tool(name: str, tool_input: dict[str, Any], tool_use_id: str) -> dict[str, Any]:
    """A `can_use_tool` control request: may the call `tool_use_id` run (with what input)?"""
    return {
        "subtype": "can_use_tool",
        "tool_name": name,
        "input": tool_input,
        "tool_use_id": tool_use_id,
        "permission_suggestions": [],
    }


def init(session_id: str, cwd: str, tools: list[str], mcp_servers: Any) -> Frame:
    """`system/init`: the session, the CLI's own tools and the SDK MCP servers it connected."""
    servers = mcp_servers if isinstance(mcp_servers, dict) else None
    return {
        "type": "system",
        "subtype": "init",
        "session_id": session_id,
        "cwd": cwd,
        "tools": tools,
        "mcp_servers": [
            {"name": name, "status": "connected", "source": "sdk"}
            for name, config in (servers or {}).items()
            if isinstance(config, dict) and config.get("type") == "sdk"
        ],
        "model": MODEL,
        "permissionMode": "default",
        "apiKeySource": "none",
    }


# -- a model answer, streamed -----------------------------------------------------------------


def stream_event(session_id: str, event: Event) -> Frame:
    """A `stream_event` frame passing on one streaming event of the answer."""
    return {
        "type": "stream_event",
        "uuid": str(uuid.uuid4()),
        "session_id": session_id,
        "event": event,
        "parent_tool_use_id": None,
    }


def _message(message_id: str, content: list[dict[str, Any]], input_tokens: int) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1},
    }


def message_start(message_id: str, input_tokens: int) -> Event:
    """The answer's first event: its message, with no content yet."""
    return {"type": "message_start", "message": _message(message_id, [], input_tokens)}


def block_start(index: int, block: dict[str, Any]) -> Event:
    """A content block (text, or a `tool_use` with an empty input) starts at `index`."""
    return {"type": "content_block_start", "index": index, "content_block": block}


def text_delta(index: int, text: str) -> Event:
    """The text of the block at `index`, in one delta."""
    return {
        "type": "content_block_delta",
        "index": index,
        "delta": {"type": "text_delta", "text": text},
    }


def input_delta(index: int, tool_input: dict[str, Any]) -> Event:
    """The input of the `tool_use` block at `index`, as one piece of JSON."""
    delta = {"type": "input_json_delta", "partial_json": json.dumps(tool_input)}
    return {"type": "content_block_delta", "index": index, "delta": delta}


def block_stop(index: int) -> Event:
    """The block at `index` is complete."""
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str, input_tokens: int, output_tokens: int) -> Event:
    """The answer's stop reason and usage."""
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


def message_stop() -> Event:
    """The answer's last event."""
    return {"type": "message_stop"}


def assistant(session_id: str, message_id: str, block: dict[str, Any]) -> Frame:
    """An `assistant` frame: one complete block of the answer `message_id`."""
    return {
        "type": "assistant",
        "message": _message(message_id, [block], 10),
        "parent_tool_use_id": None,
        "session_id": session_id,
        "uuid": str(uuid.uuid4()),
    }


# -- tools and the turn's end -----------------------------------------------------------------


def _user(session_id: str, content: list[dict[str, Any]], **extra: Any) -> Frame:
    return {
        "type": "user",
        "message": {"role": "user", "content": content},
        "parent_tool_use_id": None,
        "session_id": session_id,
        "uuid": str(uuid.uuid4()),
        **extra,
    }


def tool_result(session_id: str, use_id: str, content: Any, *, is_error: bool = False) -> Frame:
    """A `user` frame with the result of the call `use_id` (an error's text, with `is_error`)."""
    block = {"tool_use_id": use_id, "type": "tool_result", "content": content}
    if is_error:
        block["is_error"] = True
    return _user(session_id, [block], tool_use_result=content)


def interrupted(session_id: str) -> Frame:
    """The `user` frame the CLI sends when an interrupt stopped the turn's tools."""
    text = {"type": "text", "text": "[Request interrupted by user for tool use]"}
    return _user(session_id, [text])


def result(
    session_id: str,
    subtype: str,
    *,
    is_error: bool,
    num_turns: int,
    cost: float,
    input_tokens: int,
    output_tokens: int,
    session_tokens: tuple[int, int] = (0, 0),
    **fields: Any,
) -> Frame:
    """The turn's `result` frame: its usage (the leg's), the session's cost and tokens so far
    (`total_cost_usd`, `modelUsage`: over every leg, as the CLI reads them back from the
    session), and `fields`."""
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    return {
        "type": "result",
        "subtype": subtype,
        "duration_ms": 1,
        "duration_api_ms": 1,
        "is_error": is_error,
        "num_turns": num_turns,
        "session_id": session_id,
        "total_cost_usd": round(cost, 10),
        "usage": usage,
        "modelUsage": {
            MODEL: {
                "inputTokens": session_tokens[0],
                "outputTokens": session_tokens[1],
                "cacheReadInputTokens": 0,
                "cacheCreationInputTokens": 0,
                "webSearchRequests": 0,
                "costUSD": round(cost, 10),
                "contextWindow": 200000,
                "maxOutputTokens": 32000,
            }
        },
        "uuid": str(uuid.uuid4()),
        **fields,
    }
