"""An agent as another agent's tool: each call of an `agent_tool` a subagent run of its own.

`AgentsRun.agent_tool` wraps the SDK's `agent.as_tool(...)` invoker; each call is driven
here as the child run (`AgentsRun.subagent(call_id)`): started (or, on a drive, continued),
its nested SDK run recorded through the child's hooks, and its end turned into what the
calling model reads: the answer, a line saying how a guard stopped it, or why it failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents import Agent, MaxTurnsExceeded
from agents.tool_context import ToolContext

from agentfsm.adapters._attempts import watching
from agentfsm.adapters._openai_agents_hooks import (
    _CURRENT,
    _SUBAGENT,
    _atool_failure,
    _failure_message,
    _Hooks,
    _Stopped,
    partial_output,
    record_failure,
)
from agentfsm.adapters._recorder import Recorder
from agentfsm.adapters._storable import parse_arguments
from agentfsm.adapters._subagents import stopped_line
from agentfsm.events import models as m
from agentfsm.names import ActionStatus
from agentfsm.runtime._writer import Spec, approval_asked

__all__ = ["drive_agent_tool"]


async def drive_agent_tool(
    recorder: Recorder,
    hooks: _Hooks,
    agent: Agent[Any],
    run_nested: Callable[[ToolContext[Any], str], Any],
    ctx: ToolContext[Any],
    input_json: str,
) -> Any:
    """Drive one call of an `agent_tool` as the child run `recorder` records (with its
    `hooks`); return what the calling model reads."""
    subagent, current = _SUBAGENT.set(hooks), _CURRENT.set(recorder)
    failure: Exception | None = None
    try:
        # Inside the `try`: a cancel that lands while the child starts (its caller was
        # cancelled by a sibling call) must end the child too, not leave it running.
        # Stored: called again on a drive, it paused.
        if not await recorder.off_loop(recorder.load_if_stored):
            args = parse_arguments(input_json)
            objective = args["input"] if isinstance(args.get("input"), str) else input_json
            await recorder.off_loop(
                recorder.start, objective=objective, agent=agent.name, limits=None
            )
        with watching(hooks.attempts):  # the child's model calls are the child's
            output = await run_nested(ctx, input_json)
    except _Stopped as stopped:
        items = list(stopped.run_data.new_items) if stopped.run_data else []
        record = await recorder.off_loop(recorder.stopped, stopped.stop)
        return stopped_line(agent.name, record, partial_output(items))
    except MaxTurnsExceeded as exc:
        items = list(exc.run_data.new_items) if exc.run_data else []
        record = await recorder.aappend(
            "MaxTurnsExceeded",
            [Spec(m.RunTerminated, {"stop_reason": "max_turns", "detail": exc.message})],
        )
        return stopped_line(agent.name, record, partial_output(items))
    except Exception as exc:  # noqa: BLE001  (any tool's failure: the model reads it)
        await record_failure(recorder, exc)
        failure = exc
    except BaseException as exc:  # the task was cancelled
        await record_failure(recorder, exc)
        raise
    finally:
        _SUBAGENT.reset(subagent)
        _CURRENT.reset(current)
    if failure is not None:  # as any failing tool: `tool.failed`, the model reads why
        await _atool_failure(ctx.tool_call_id, failure)
        return _failure_message(failure)
    actions = recorder.record.actions.values()
    asked = [a for a in actions if a.status == ActionStatus.PROPOSED]
    if asked:  # the SDK paused the nested run on these: our caller's result carries them
        specs = [approval_asked(a.action_id, a.tool, a.arguments) for a in asked]
        await recorder.aappend("Agent.as_tool interruptions", specs)
    elif not any(a.status == ActionStatus.STARTED for a in actions):
        # Not waiting on a subagent of its own either: it ended (the table says if not).
        await recorder.aappend("Agent.as_tool returned", [Spec(m.RunCompleted, {})])
    return output
