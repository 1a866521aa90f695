"""A scripted `claude` CLI: run Claude Agent SDK code offline, with no CLI and no network.

`ScriptedCLI(options, steps, tools, sessions)` is a `claude_agent_sdk.Transport` that plays
the CLI's side of the SDK's control protocol: hand it to the SDK's own `transport=` parameter
(`ClaudeSDKClient(options, transport=...)`, or `ClaudeRun.run(..., transport=...)`) and the
SDK's real client, hooks, `can_use_tool` and in-process MCP tools run against a model you
script. `scripted_cli(steps, ...)` gives the `fn(options)` form, one transport per leg, all
sharing the script (a resume takes the next answers)::

    from agentfsm.testing.claude_transport import Answer, Use, scripted_cli

    transport = scripted_cli(
        [Answer(uses=(Use("toolu_1", "mcp__shop__refund", {"order_id": "O-1"}),)),
         Answer("Refunded.")],
    )
    await ClaudeRun(store, "r1").run("refund O-1", options, transport=transport)

What it plays, in the order the real CLI sends it (`tests/adapters/claude_frames.json`
keeps a recording of the real CLI's frames, and a test checks these against it):
`system/init`; per model answer the `stream_event`s (`message_start`, `content_block_*`,
`message_delta` with usage, `message_stop`) with an `assistant` frame per block; hook
`PreToolUse` for a call while its answer still streams (a later call of the answer once the
one before it ran); `can_use_tool`; the tool; hook `PostToolUse` or `PostToolUseFailure`; a
`user` frame with the tool result; hook `Stop` and a `result` frame with the usage and
`total_cost_usd` and `modelUsage` (over the session, every leg: `COST_PER_ANSWER` and the
answer's tokens each), also when a leg pauses or is interrupted, as the real CLI reports them.

Tools: a call named `mcp__<server>__<tool>` of an in-process SDK MCP server in the options
(`create_sdk_mcp_server`) is sent to the SDK over the protocol (`mcp_message`,
`tools/call`), as the CLI does; any other name is a tool the CLI itself runs (as `Bash`),
played by `tools[name](**input)`, sync or async, a `ValueError` being the tool's error.
An MCP result with `isError` is the tool's error too.

Like the CLI, it sets a call aside when `PreToolUse` says `defer`, runs the answer's other
calls, then ends the leg (the `result` has `stop_reason: tool_deferred` and
`deferred_tool_use`; one call: a second `defer` replaces the first), keeps the session in
`sessions/<session_id>.json` (or, when the options' `env` names a `CLAUDE_CONFIG_DIR`,
where the real CLI keeps its transcript under it: so the adapter keeps it in its store and
another machine's resume finds it there), and on a resume (`options.resume`) replays that
call first.
`interrupt` cancels a running tool (its result says the user did not want it) and ends with
`error_during_execution`. Options that are CLI flags (`model`, `cwd`, ...) are not applied
(the script is the model), but for `permission_mode="bypassPermissions"`: as the CLI, it then
asks no `can_use_tool`.

It sends no `session_state_changed` frames: the SDK then treats it as a CLI from before them
and ends the run on the `result` frame. The protocol is the SDK's and undocumented; this
transport follows `claude-agent-sdk` 0.2.18x (the `claude` extra's pinned range).

This module is the CLI's flow: when it sends what, the hooks, the calls, the session.
What each frame looks like is `_claude_frames` (pure builders, checked against the
recording); how a call reaches an in-process SDK MCP server (JSON-RPC inside the control
protocol) is `_claude_mcp`.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import os
import re
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentfsm._extras import missing_extra

try:
    from claude_agent_sdk import ClaudeAgentOptions, Transport
except ImportError as exc:  # pragma: no cover - the extra is installed in the tests
    raise missing_extra("agentfsm.testing.claude_transport", "claude", exc) from exc

from agentfsm.testing import _claude_frames as frames
from agentfsm.testing._claude_frames import MODEL
from agentfsm.testing._claude_mcp import SdkServers

__all__ = ["COST_PER_ANSWER", "MODEL", "Answer", "ScriptedCLI", "Use", "scripted_cli"]

#: The CLI's cost per answer of 10 input and 5 output tokens (its price list: $4 / $20 per
#: million tokens), as `total_cost_usd` adds it up.
COST_PER_ANSWER = 0.00014
#: Where `scripted_cli` keeps sessions by default (a resume in another process finds them).
SESSIONS = Path(tempfile.gettempdir()) / "agentfsm-scripted-claude"


@dataclass(frozen=True)
class Use:
    """A `tool_use` block: `name` with `input`, id `id`."""

    id: str
    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Answer:
    """One model answer: text, then tool uses."""

    text: str = ""
    uses: tuple[Use, ...] = ()
    input_tokens: int = 10
    output_tokens: int = 5


class ScriptedCLI(Transport):
    """The CLI's side of the protocol, scripted (see the module docstring).

    Args:
        options: the options the SDK's client was built with (`resume`, `mcp_servers` are
            read; the adapter's `transport=fn(options)` form passes them).
        steps: the model's answers, in order; each answer takes the next one, and the list
            is consumed (share it between legs so a resume goes on with the script).
        tools: the tools the CLI itself runs, by name (`fn(**input)`, sync or async).
        sessions: where sessions are kept, for a resume (in this process or another).
    """

    def __init__(
        self,
        options: ClaudeAgentOptions,
        steps: list[Answer],
        tools: Mapping[str, Callable[..., Any]] | None = None,
        sessions: Path | str = SESSIONS,
    ) -> None:
        self.options = options
        self.steps = steps
        self.tools = dict(tools or {})
        self.sessions = Path(sessions)
        self.session_id = options.resume or str(uuid.uuid4())
        self._out: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._hooks: dict[str, list[str]] = {}
        self._ids = itertools.count(1)
        self._turn: asyncio.Task[None] | None = None
        self._tool: asyncio.Task[Any] | None = None
        self._interrupted = False
        self._ready = False
        self._session = self._load()
        self._usage = [0, 0]
        self._turns = 0
        self._last_text = ""
        self._mcp = SdkServers(options, self._ask, self._ids)
        #: Every frame both ways, in order (`("cli" | "sdk", frame)`), for checks.
        self.frames: list[tuple[str, dict[str, Any]]] = []  # both ways, for the frame checks

    # -- the Transport ----------------------------------------------------------------------

    async def connect(self) -> None:
        self._ready = True

    def is_ready(self) -> bool:
        return self._ready

    async def end_input(self) -> None:
        pass

    async def close(self) -> None:
        self._ready = False
        if self._turn is not None:
            self._turn.cancel()
        self._out.put_nowait(None)

    async def read_messages(self) -> AsyncIterator[dict[str, Any]]:
        while True:
            frame = await self._out.get()
            if frame is None:
                return
            yield frame

    async def write(self, data: str) -> None:
        frame = json.loads(data)
        self.frames.append(("sdk", frame))
        kind = frame.get("type")
        if kind == "control_response":
            response = frame["response"]
            future = self._pending.pop(response["request_id"], None)
            if future is not None and not future.done():
                future.set_result(response.get("response") or {})
        elif kind == "control_request":
            await self._control(frame["request_id"], frame["request"])
        elif kind == "user" and self._turn is None:
            self._turn = asyncio.ensure_future(self._run(replay=False))

    # -- the control protocol ---------------------------------------------------------------

    def _send(self, frame: dict[str, Any]) -> None:
        self.frames.append(("cli", frame))
        self._out.put_nowait(frame)

    async def _control(self, request_id: str, request: dict[str, Any]) -> None:
        subtype = request.get("subtype")
        response: dict[str, Any] = {}
        if subtype == "initialize":
            for event, matchers in (request.get("hooks") or {}).items():
                self._hooks[event] = [i for m in matchers for i in m["hookCallbackIds"]]
            response = {"commands": [], "agents": [], "output_style": "default"}
        elif subtype == "interrupt":
            self._interrupted = True
            if self._tool is not None:
                self._tool.cancel()
            response = {"still_queued": []}
        self._send(frames.control_response(request_id, response))
        if subtype == "initialize" and self.options.resume and self._turn is None:
            self._turn = asyncio.ensure_future(self._run(replay=True))

    async def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        request_id = str(uuid.uuid4())
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        self._send(frames.control_request(request_id, request))
        return await future

    async def _hook(self, event: str, about: str | None, **data: Any) -> dict[str, Any]:
        """Ask every hook callback of `event`; the last non-empty answer counts."""
        answer: dict[str, Any] = {}
        payload = frames.hook_input(
            self.session_id, str(self._file()), str(self.sessions), event, **data
        )
        for callback_id in self._hooks.get(event, []):
            got = await self._ask(frames.hook_callback(callback_id, payload, about))
            if got:
                answer = got
        return answer

    # -- the session ------------------------------------------------------------------------

    def _file(self) -> Path:
        config = (self.options.env or {}).get("CLAUDE_CONFIG_DIR")
        if config:
            # Where the real CLI keeps the session's transcript (`<config>/projects/<cwd,
            # each character but letters and digits as '-'>/<id>.jsonl`): the adapter keeps
            # it in its store at a pause and writes it back on the machine that resumes.
            cwd = str(Path(self.options.cwd or os.getcwd()).resolve())
            project = re.sub(r"[^A-Za-z0-9]", "-", cwd)
            return Path(config) / "projects" / project / f"{self.session_id}.jsonl"
        return self.sessions / f"{self.session_id}.json"

    def _load(self) -> dict[str, Any]:
        if self.options.resume and self._file().exists():
            return json.loads(self._file().read_text(encoding="utf-8"))  # type: ignore[no-any-return]
        return {"deferred": None, "cost": 0.0}

    def _save(self) -> None:
        path = self._file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self._session), encoding="utf-8")

    # -- a turn -----------------------------------------------------------------------------

    async def _run(self, *, replay: bool) -> None:
        try:
            await self._play(replay=replay)
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a broken script: say so, as a CLI's crash would
            self._result(
                "error_during_execution",
                is_error=True,
                stop_reason=None,
                errors=[f"the scripted CLI broke: {exc!r}"],
            )
            raise

    async def _play(self, *, replay: bool) -> None:
        self._usage = [0, 0]
        self._turns = 0
        self._last_text = ""
        deferred = self._session.get("deferred")
        if replay and deferred:  # the CLI replays a deferred call before its `init`
            self._session["deferred"] = None
            ended = await self._uses([Use(deferred["id"], deferred["name"], deferred["input"])], {})
            if ended:
                return
        init = frames.init(
            self.session_id, str(self.sessions), sorted(self.tools), self.options.mcp_servers
        )
        self._send(init)
        while not self._interrupted:
            if not self.steps:
                self._result(
                    "error_during_execution",
                    is_error=True,
                    stop_reason=None,
                    errors=["the script has no more answers"],
                )
                return
            answer = self.steps.pop(0)
            pre = await self._stream(answer)
            if self._interrupted:
                break
            if not answer.uses:
                self._last_text = answer.text
                await self._hook("Stop", str(uuid.uuid4()), stop_hook_active=False)
                self._result("success", stop_reason="end_turn", result=answer.text)
                return
            if await self._uses(list(answer.uses), pre):
                return
        self._send(frames.interrupted(self.session_id))
        self._result(
            "error_during_execution",
            is_error=True,
            stop_reason="tool_use",
            terminal_reason="aborted_tools",
        )

    def _event(self, event: frames.Event) -> None:
        self._send(frames.stream_event(self.session_id, event))

    def _assistant(self, message_id: str, block: dict[str, Any]) -> None:
        self._send(frames.assistant(self.session_id, message_id, block))

    async def _stream(self, answer: Answer) -> dict[str, asyncio.Future[dict[str, Any]]]:
        """Stream one answer; the first call's `PreToolUse` is asked while it streams."""
        message_id = f"msg_{next(self._ids)}"
        self._event(frames.message_start(message_id, answer.input_tokens))
        await asyncio.sleep(0)
        pre: dict[str, asyncio.Future[dict[str, Any]]] = {}
        index = 0
        if answer.text:
            self._event(frames.block_start(index, {"type": "text", "text": ""}))
            self._event(frames.text_delta(index, answer.text))
            self._assistant(message_id, {"type": "text", "text": answer.text})
            self._event(frames.block_stop(index))
            index += 1
        for use in answer.uses:
            block = {"type": "tool_use", "id": use.id, "name": use.name, "input": {}}
            self._event(frames.block_start(index, block))
            self._event(frames.input_delta(index, use.input))
            self._assistant(message_id, {**block, "input": use.input})
            if not pre:
                pre[use.id] = asyncio.ensure_future(self._pre(use))
                await asyncio.sleep(0)
            self._event(frames.block_stop(index))
            index += 1
            await asyncio.sleep(0)
        stop = "tool_use" if answer.uses else "end_turn"
        self._event(frames.message_delta(stop, answer.input_tokens, answer.output_tokens))
        self._event(frames.message_stop())
        self._turns += 1
        self._usage[0] += answer.input_tokens
        self._usage[1] += answer.output_tokens
        self._session["cost"] = self._session.get("cost", 0.0) + COST_PER_ANSWER
        # The session's tokens over every leg, as the CLI's `modelUsage` reports them.
        was = self._session.get("tokens", [0, 0])
        self._session["tokens"] = [was[0] + answer.input_tokens, was[1] + answer.output_tokens]
        return pre

    def _pre(self, use: Use) -> Any:
        return self._hook(
            "PreToolUse", use.id, tool_name=use.name, tool_input=use.input, tool_use_id=use.id
        )

    def _tool_result(self, use: Use, content: Any, *, is_error: bool = False) -> None:
        self._send(frames.tool_result(self.session_id, use.id, content, is_error=is_error))

    async def _uses(self, uses: list[Use], pre: dict[str, asyncio.Future[dict[str, Any]]]) -> bool:
        """Run an answer's calls in order; True when the turn ended (deferred, interrupted).

        As the real CLI: a deferred call is set aside and the answer's other calls go on;
        once they are done the leg ends keeping the deferred call. It keeps one: a later
        `defer` in the answer replaces the earlier call, which the conversation then drops.
        """
        deferred: Use | None = None
        for use in uses:
            decided = await (pre[use.id] if use.id in pre else self._pre(use))
            if self._interrupted:
                return False
            out = decided.get("hookSpecificOutput") or {}
            decision = out.get("permissionDecision")
            if decision == "defer":
                deferred = use
                continue
            if decision == "deny":
                self._tool_result(
                    use, out.get("permissionDecisionReason") or "denied", is_error=True
                )
                continue
            if self.options.permission_mode == "bypassPermissions":
                permission: dict[str, Any] = {"behavior": "allow"}  # the CLI asks nobody
            else:
                permission = await self._ask(frames.can_use_tool(use.name, use.input, use.id))
            if permission.get("behavior") != "allow":
                self._tool_result(use, permission.get("message") or "denied", is_error=True)
                if permission.get("interrupt"):
                    self._interrupted = True
                    return False
                continue
            if await self._call(use, permission.get("updatedInput") or use.input):
                return False
        if deferred is None:
            return False
        kept = {"id": deferred.id, "name": deferred.name, "input": deferred.input}
        self._session["deferred"] = kept
        self._save()
        self._result("success", stop_reason="tool_deferred", result="", deferred_tool_use=kept)
        return True

    async def _call(self, use: Use, arguments: dict[str, Any]) -> bool:
        """Run one tool; True when an interrupt cancelled it."""
        sdk = self._mcp.tool_of(use.name)
        if sdk is not None:
            self._tool = asyncio.ensure_future(self._mcp.call(*sdk, arguments))
        else:
            fn = self.tools[use.name]
            if inspect.iscoroutinefunction(fn):
                self._tool = asyncio.ensure_future(fn(**arguments))
            else:
                self._tool = asyncio.ensure_future(asyncio.to_thread(fn, **arguments))
        try:
            value = await self._tool
        except asyncio.CancelledError:
            if not self._interrupted:
                raise
            self._tool_result(
                use, "The user doesn't want to proceed with this tool use.", is_error=True
            )
            return True
        except ValueError as exc:
            await self._hook(
                "PostToolUseFailure",
                use.id,
                tool_name=use.name,
                tool_input=use.input,
                tool_use_id=use.id,
                error=str(exc),
                is_interrupt=False,
            )
            self._tool_result(use, str(exc), is_error=True)
            return False
        finally:
            self._tool = None
        response = [{"type": "text", "text": value}] if isinstance(value, str) else value
        await self._hook(
            "PostToolUse",
            use.id,
            tool_name=use.name,
            tool_input=use.input,
            tool_use_id=use.id,
            tool_response=response,
        )
        self._tool_result(use, response)
        return False

    def _result(self, subtype: str, *, is_error: bool = False, **fields: Any) -> None:
        self._save()
        self._send(
            frames.result(
                self.session_id,
                subtype,
                is_error=is_error,
                num_turns=self._turns,
                cost=self._session.get("cost", 0.0),
                input_tokens=self._usage[0],
                output_tokens=self._usage[1],
                session_tokens=tuple(self._session.get("tokens", (0, 0))),
                **fields,
            )
        )


def scripted_cli(
    steps: list[Answer],
    tools: Mapping[str, Callable[..., Any]] | None = None,
    sessions: Path | str = SESSIONS,
) -> Callable[[ClaudeAgentOptions], ScriptedCLI]:
    """`fn(options)` giving a `ScriptedCLI` over one shared script: the form `ClaudeRun`'s
    `transport=` takes, so each leg (a run, a resume) gets a transport built with the options
    it runs under, and a resume goes on with the answers left."""
    script = steps

    def build(options: ClaudeAgentOptions) -> ScriptedCLI:
        return ScriptedCLI(options, script, tools, sessions)

    return build
