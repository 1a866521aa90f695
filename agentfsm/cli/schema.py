"""`agentfsm schema`: the JSON Schema of the events, for producers in other languages."""

from __future__ import annotations

import argparse

from agentfsm.cli._common import Parser
from agentfsm.cli._output import print_json
from agentfsm.events.codec import event_json_schema

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm schema`."""
    p = subparsers.add_parser(
        "schema",
        help="print the JSON Schema of the event wire format",
        description="Print the JSON Schema (draft 2020-12) of one event line.",
        epilog="example:\n  agentfsm schema > agentfsm-event.schema.json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.set_defaults(handler=lambda _args: _schema())


def _schema() -> int:
    print_json(event_json_schema, "schema", indent=2)
    return 0
