"""Examples of a strategy, drawn the same way on every call, from inside a `@given` test too.

`edge_covering_paths` and `legal_runs` try a few examples of the payload strategies you
give, so a condition on a field can hold. Hypothesis refuses to start a test inside another
(its `nested_given` health check, and `.example()` refuses too), and both may well be
called from inside one. Hypothesis keeps "which test is running" per thread, so the
examples are drawn by a small test of their own in a worker thread; outside a test they are
drawn right here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, currently_in_test_context, find, given, settings
from hypothesis import strategies as st

__all__ = ["samples", "simplest"]

T = TypeVar("T")


def _outside_any_test(work: Callable[[], T]) -> T:
    if not currently_in_test_context():
        return work()
    # The worker has no test context; the caller waits for it, so nothing runs concurrently.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentfsm-samples") as pool:
        return pool.submit(work).result()


def _draw(strategy: st.SearchStrategy[Any], count: int) -> tuple[Any, ...]:
    out: list[Any] = []

    @settings(
        max_examples=count,
        derandomize=True,  # the same examples on every call
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(strategy)
    def collect(value: Any) -> None:
        out.append(value)

    collect()
    return tuple(out)


@functools.lru_cache(maxsize=256)
def samples(strategy: st.SearchStrategy[Any], count: int = 10) -> tuple[Any, ...]:
    """Up to `count` examples of `strategy`, the same on every call (a derandomized draw).

    Cached per strategy object: a `fields=` mapping built once at import time costs one draw
    however often the paths are asked for.
    """
    return _outside_any_test(lambda: _draw(strategy, count))


@functools.lru_cache(maxsize=256)
def simplest(strategy: st.SearchStrategy[Any]) -> Any:
    """The simplest example of `strategy` (what Hypothesis shrinks towards), e.g. `run_0`."""

    def work() -> Any:
        quiet = settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
        return find(strategy, lambda _: True, settings=quiet)

    return _outside_any_test(work)
