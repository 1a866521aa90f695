"""The loan lifecycle as Procrastinate jobs, its documents expiring after `WAIT` seconds.

The engine of `test_timeouts_procrastinate.py`, and a worker process to run it:
`python -m tests.runtime._pq_loans DSN NAME` (settings as `_pq_app`'s, from the
environment).
"""

from __future__ import annotations

import logging
import os
import sys
from datetime import timedelta

import structlog

from agentfsm.reducers import Reducer
from agentfsm.runtime import Runner
from agentfsm.runtime.procrastinate import ProcrastinateEngine
from agentfsm.stores import StoreOptions
from agentfsm.stores.base import EventStore
from tests.fixtures.loan import loan_table, review_agent
from tests.runtime import _pq_app

#: Seconds an application waits for its documents.
WAIT = 2.0
#: The loan lifecycle with that wait.
TABLE = loan_table(documents_wait=timedelta(seconds=WAIT))
QUEUE = "loans"


def _runner(store: EventStore) -> Runner:
    return Runner(store, review_agent())


def engine(dsn: str) -> ProcrastinateEngine:
    """The engine of the loan runs: its store folds them with `TABLE`."""
    return ProcrastinateEngine(
        dsn,
        _runner,
        settings=_pq_app.settings(QUEUE),
        options=StoreOptions(reducer=Reducer(TABLE)),
    )


def main(argv: list[str]) -> None:
    dsn, name = argv
    level = getattr(logging, os.environ.get("PQ_LOG", "ERROR"))
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
    logging.basicConfig(level=logging.CRITICAL)
    engine(dsn).serve(name=name)


if __name__ == "__main__":
    main(sys.argv[1:])
