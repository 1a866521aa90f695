"""`agentfsm schema`: the JSON Schema of the events, for producers in other languages."""

from __future__ import annotations

import argparse

from agentfsm.cli._common import Parser, load_table
from agentfsm.cli._output import print_json
from agentfsm.events.codec import event_json_schema
from agentfsm.events.vocabulary import BUILTIN_EVENTS

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm schema`."""
    p = subparsers.add_parser(
        "schema",
        help="print the JSON Schema of the event wire format",
        description="Print the JSON Schema (draft 2020-12) of one event line.",
        epilog=(
            "examples:\n  agentfsm schema > agentfsm-event.schema.json\n"
            "  agentfsm schema --table myapp.lifecycle:TABLE   # with the table's own events"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--table", metavar="MODULE:ATTR", action="append",
        help="include the table's own event types (default: the built-in ones); one table",
    )  # fmt: skip
    p.set_defaults(handler=_schema)


def _schema(args: argparse.Namespace) -> int:
    table = load_table(args.table, "schema")
    events = table.event_types if table is not None else BUILTIN_EVENTS
    print_json(lambda: event_json_schema(events), "schema", indent=2)
    return 0
