"""`agentfsm approve|reject`: decide a call waiting for approval."""

from __future__ import annotations

import argparse

from agentfsm.adapters.stores.base import EventStore
from agentfsm.cli import _args
from agentfsm.cli._common import Parser
from agentfsm.cli.control import command, run_argument, steer
from agentfsm.reducers.record import RunRecord
from agentfsm.runtime import control

__all__ = ["add_parsers"]


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register approve and reject."""
    p = command(
        subparsers, "approve", "approve the exact call an action waits with (approval.accepted)",
        "agentfsm approve run_123 call_cancel_123 --approver alice --store runs.db",
    )  # fmt: skip
    _arguments(p, "who approved")
    p.set_defaults(handler=steer("approve", _approve))

    p = command(
        subparsers, "reject", "refuse a call waiting for approval; the model sees the reason",
        'agentfsm reject run_123 call_cancel_123 --reason "not your order" --store runs.db',
    )  # fmt: skip
    _arguments(p, "who refused")
    p.add_argument("--reason", type=_args.text, help="why (shown to the model)")
    p.set_defaults(handler=steer("reject", _reject))


def _arguments(p: argparse.ArgumentParser, who: str) -> None:
    run_argument(p)
    p.add_argument("action_id", type=_args.run_id, metavar="ACTION_ID")
    p.add_argument("--approver", type=_args.identity, help=who)


def _approve(store: EventStore, a: argparse.Namespace) -> RunRecord:
    return control.approve(store, a.run_id, a.action_id, a.approver)


def _reject(store: EventStore, a: argparse.Namespace) -> RunRecord:
    return control.reject(store, a.run_id, a.action_id, a.approver, a.reason)
