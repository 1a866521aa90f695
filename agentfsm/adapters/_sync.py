"""`run_blocking`: an adapter's sync entry points, on one event loop the thread keeps.

An SDK's async client (`AsyncOpenAI`, the httpx pool under it) binds its connections to the
event loop that first used them. `asyncio.run` makes a loop per call and closes it, so a
sync `run` followed by a sync `drive` in one process over one shared client failed with
"Event loop is closed" (recorded as `run.failed`). The adapters' sync methods therefore run
on a loop kept per thread (an `asyncio.Runner`, closed when the process exits): every sync
call of a thread, of any adapter, shares it, as the client's connections expect.

Called where a loop is already running (a notebook, async code), it refuses up front with
what to do (`await` the async method, `arun` or `adrive`), before anything is recorded.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["run_blocking"]

_T = TypeVar("_T")

_KEPT = threading.local()
_ALL: list[asyncio.Runner] = []
_LOCK = threading.Lock()


def _runner() -> asyncio.Runner:
    runner: asyncio.Runner | None = getattr(_KEPT, "runner", None)
    if runner is None:
        runner = asyncio.Runner()
        _KEPT.runner = runner
        with _LOCK:
            _ALL.append(runner)
    return runner


def run_blocking(coro: Coroutine[Any, Any, _T], what: str) -> _T:
    """Run `coro` to its end on this thread's kept event loop (see the module docstring).

    Raises:
        RuntimeError: called while an event loop runs in this thread; `what` names the
            sync method, whose `a`-prefixed twin is the one to await instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise RuntimeError(
            f"{what}() cannot be called while an event loop is running "
            f"(async code, a notebook): await a{what}() instead"
        )
    return _runner().run(coro)


@atexit.register
def _close_all() -> None:
    with _LOCK:
        runners, _ALL[:] = list(_ALL), []
    for runner in runners:
        # Exiting: a loop that cannot close is left as it is.
        with contextlib.suppress(Exception):
            runner.close()
