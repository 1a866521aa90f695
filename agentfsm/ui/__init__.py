"""A local web UI for runs, approvals and tables, and a self-contained review file.

`create_app(source, config)` is the Starlette app `agentfsm ui` serves (see docs/ui.md for
the security model), its pages kept live by server-sent events (`LiveConfig`); `Source`
reads a store through a pool of handles per table, `LogSource` a JSON Lines log;
`render_report` writes the one-file HTML review `agentfsm report` makes.
Needs the `ui` extra (`pip install 'agentfsm[ui]'`).
"""

from agentfsm.ui._live import LiveConfig
from agentfsm.ui._log_source import LogSource
from agentfsm.ui._source import CacheUse, Source, StoreOpener
from agentfsm.ui.app import UIConfig, create_app
from agentfsm.ui.report import render_report

__all__ = [
    "CacheUse",
    "LiveConfig",
    "LogSource",
    "Source",
    "StoreOpener",
    "UIConfig",
    "create_app",
    "render_report",
]
