"""A scripted, offline model: replays decisions, for tests, examples and benchmarks.

`ScriptedModel([d1, d2, ...])` answers call after call with the next decision, or a function
of the `ModelContext` when a step needs to look at results (`lambda ctx: Decision.answer(
ctx.results[0].result)`). It keeps what it was shown in `contexts`.

With `by_turn=True` it answers turn `n` with step `n` instead, whatever this instance was
asked before: a run driven on in another process (with a new model object) gets the answers
the script gives for the turns it is at.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agentfsm.errors import ModelError
from agentfsm.runtime.model import Decision, ModelContext

__all__ = ["ScriptedModel"]

Script = Decision | Callable[[ModelContext], Any] | BaseException


class ScriptedModel:
    """Answers each call with the next step of a script.

    Args:
        script: decisions, functions of the context returning a decision (or stream
            chunks), or exceptions to raise.
        repeat_last: keep answering with the last step once the script is used up
            (a runaway model); otherwise running past the end is a `ModelError`.
        by_turn: pick the step by the run's turn (`ctx.turn`), not by this object's count
            of calls.
    """

    def __init__(
        self, script: Iterable[Script], *, repeat_last: bool = False, by_turn: bool = False
    ) -> None:
        self.script = list(script)
        self.repeat_last = repeat_last
        self.by_turn = by_turn
        self.contexts: list[ModelContext] = []

    @property
    def calls(self) -> int:
        """How many times the model was called."""
        return len(self.contexts)

    def __call__(self, ctx: ModelContext) -> Any:
        """The next scripted answer."""
        i = ctx.turn - 1 if self.by_turn else len(self.contexts)
        self.contexts.append(ctx)
        if i >= len(self.script):
            if not self.repeat_last or not self.script:
                raise ModelError(
                    f"the script has {len(self.script)} steps; call {i + 1} is past it"
                )
            i = len(self.script) - 1
        step = self.script[i]
        if isinstance(step, BaseException):
            raise step
        if isinstance(step, Decision):
            return step
        return step(ctx)
