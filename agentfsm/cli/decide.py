"""`agentfsm approve|reject`: decide a call waiting for approval, having seen the call.

A person approving `t1` approves a tool and its arguments, so the command shows them: on
stderr before appending (`approving call 't1' of run 'r1': refund {"amount": 10}, digest
sha256:...`), so that a refusal or a crash still says what was being decided; on stdout
after, the same words in the past tense and the run's status, as the record of what was
decided (stdout stays what a script reads).

`--digest` pins the call a person reviewed (the digest `replay --format json` and this
command print): a call with another digest is refused, exit 1, naming both. An approval
past its `expires_at` is refused too (the runtime would ask again rather than run it);
a rejection never is. A call the record does not hold, or that no longer waits, is left to
the library, whose refusal knows more (who already decided it, and when; or a subagent run
where the call waits).
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from agentfsm.cli import _args
from agentfsm.cli._common import Parser
from agentfsm.cli._output import shown, shown_json
from agentfsm.cli.control import DecisionRefusedError, command, run_argument, steer
from agentfsm.events.models import parse_timestamp
from agentfsm.names import ActionStatus
from agentfsm.record import Action, RunRecord
from agentfsm.runtime import control
from agentfsm.stores.base import EventStore

__all__ = ["add_parsers"]

_WORDS = {"approve": ("approving", "approved"), "reject": ("rejecting", "rejected")}


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register approve and reject."""
    p = command(
        subparsers, "approve", "approve the exact call an action waits with (approval.accepted)",
        "agentfsm approve run_123 call_cancel_123 --approver alice --digest sha256:... "
        "--store runs.db",
    )  # fmt: skip
    _arguments(p, "who approved")
    p.add_argument("--reason", type=_args.text, help="why (kept on the action)")
    p.set_defaults(handler=steer("approve", lambda s, a: _decide(s, a, "approve")))

    p = command(
        subparsers, "reject", "refuse a call waiting for approval; the model sees the reason",
        'agentfsm reject run_123 call_cancel_123 --reason "not your order" --store runs.db',
    )  # fmt: skip
    _arguments(p, "who refused")
    p.add_argument("--reason", type=_args.text, help="why (shown to the model)")
    p.set_defaults(handler=steer("reject", lambda s, a: _decide(s, a, "reject")))


def _arguments(p: argparse.ArgumentParser, who: str) -> None:
    run_argument(p)
    p.add_argument("action_id", type=_args.run_id, metavar="ACTION_ID")
    p.add_argument("--approver", type=_args.identity, help=who)
    p.add_argument(
        "--digest", type=_args.digest, metavar="sha256:HEX",
        help="the call's digest as reviewed: a call with another digest is refused",
    )  # fmt: skip


def _decide(store: EventStore, args: argparse.Namespace, verb: str) -> RunRecord:
    doing, done = _WORDS[verb]
    action = store.load(args.run_id).actions.get(args.action_id)
    if action is None or action.status != ActionStatus.APPROVAL_PENDING:
        return _append(store, args, verb)
    call = _check(action, args, verb)
    print(f"{doing} {call}", file=sys.stderr)
    record = _append(store, args, verb)
    print(f"{done} {call}")
    return record


def _check(action: Action, args: argparse.Namespace, verb: str) -> str:
    """The call as shown to the person, once it is the one reviewed and still decidable."""
    where = f"call '{shown(action.action_id)}' of run '{shown(args.run_id)}'"
    actual = action.arguments_digest
    if args.digest is not None and args.digest != actual:
        raise DecisionRefusedError(f"{where} has digest {actual}, not the reviewed {args.digest}")
    expires = action.expires_at
    if verb == "approve" and expires is not None and datetime.now(UTC) > parse_timestamp(expires):
        raise DecisionRefusedError(
            f"approval of call '{shown(action.action_id)}' expired at {expires}"
        )
    return f"{where}: {shown(action.tool)} {shown_json(action.arguments)}, digest {actual}"


def _append(store: EventStore, args: argparse.Namespace, verb: str) -> RunRecord:
    """The one call into the library that records the decision, bound to the reviewed
    digest (the check above refuses a mismatch early; the reducer refuses it too, should the
    call change in between)."""
    if verb == "approve":
        return control.approve(
            store, args.run_id, args.action_id, args.approver, digest=args.digest,
            reason=args.reason,
        )  # fmt: skip
    return control.reject(
        store, args.run_id, args.action_id, args.approver, args.reason, digest=args.digest
    )
