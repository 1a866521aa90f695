"""`agentfsm cancel|pause|resume|append|runs`: steer runs in a store, and list them.

Each steering command appends one event and prints the run's status after it; the process
driving the run notices at its next step. `steer` is the frame every steering command
(`approve` and `reject` too) runs in: the store opened and closed, a run the store lacks a
usage error (exit 2), a refusal one line with its notes (exit 1).

`pause` and `append` (and `migrate`) would change a run under the driver that holds it: while
one does they are refused, exit 1, naming it ("run 'r1' is being driven by 'w1' (pid 4242 on
box, heartbeat 2 s ago); wait for it or stop it"), unless `--wait S` gives it S seconds to let
go. `cancel`, `resume`, `approve` and `reject` go in whoever drives the run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from json import loads as parse_json
from typing import Any

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Handler, Parser, UsageError
from agentfsm.cli._output import print_json, shown
from agentfsm.cli._store import add_store_argument, opened_run_store, opened_store
from agentfsm.errors import EventFormatError, LifecycleError, RunHeldError, RunNotFoundError
from agentfsm.record import RunRecord
from agentfsm.runtime import control
from agentfsm.stores.base import EventStore

__all__ = [
    "DecisionRefusedError",
    "add_parsers",
    "command",
    "run_argument",
    "steer",
    "wait_argument",
]


class DecisionRefusedError(Exception):
    """The command line itself refuses a decision (exit 1, like a lifecycle refusal)."""


def steer(name: str, act: Callable[[EventStore, argparse.Namespace], RunRecord]) -> Handler:
    """The handler that runs `act` on the store and prints the run's status after it."""

    def handler(args: argparse.Namespace) -> int:
        with opened_run_store(args.store, name, args.run_id, args.table) as store:
            try:
                record = act(store, args)
            except RunNotFoundError as exc:
                raise UsageError(f"{PROG} {name}: {exc}") from None
            except (LifecycleError, RunHeldError, DecisionRefusedError) as exc:
                print(f"{PROG} {name}: refused: {shown(str(exc))}", file=sys.stderr)
                for note in getattr(exc, "__notes__", ()):  # e.g. where the call waits
                    print(f"  {shown(note)}", file=sys.stderr)
                return 1
        pending = (
            f", waiting for approval: {', '.join(map(shown, record.pending_approvals))}"
            if record.pending_approvals
            else ""
        )
        print(f"run {shown(record.run_id)}: {record.status} (version {record.version}){pending}")
        return 0

    return handler


def command(
    subparsers: argparse._SubParsersAction[Parser], name: str, summary: str, example: str
) -> argparse.ArgumentParser:
    """A store subcommand's parser: its summary, and an example in `--help`."""
    return subparsers.add_parser(
        name,
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=f"example:\n  {example}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def run_argument(p: argparse.ArgumentParser) -> None:
    """`RUN_ID` and `--store`."""
    p.add_argument("run_id", type=_args.run_id, metavar="RUN_ID")
    add_store_argument(p)


def wait_argument(p: argparse.ArgumentParser) -> None:
    """`--wait S`, for a command refused while a driver holds the run."""
    p.add_argument(
        "--wait", type=_args.seconds, metavar="S",
        help="while a driver holds the run, wait up to S seconds for it to let go "
        "(refused at once without)",
    )  # fmt: skip


def _cancel(store: EventStore, a: argparse.Namespace) -> RunRecord:
    return control.cancel(store, a.run_id, reason=a.reason, requested_by=a.requested_by)


#: A field as the command line gave it: its name, its value, and whether it came as text.
_Field = tuple[str, Any, bool]


def _field(text: str) -> _Field:
    """`name=text` or `name:=json` (as HTTPie spells them), checked as the line is read."""
    name, json_sep, raw = text.partition(":=")
    if json_sep and name and "=" not in name:
        try:
            return name, parse_json(raw), False
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{text!r}: not JSON after ':=' ({exc})") from None
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"{text!r}: want FIELD=TEXT or FIELD:=JSON")
    return name, value, True


def _append(store: EventStore, a: argparse.Namespace) -> RunRecord:
    # One mapping, not keywords: a field named `clock` is the event's, not the verb's clock.
    fields = {name: value for name, value, _ in a.fields}
    try:
        return control.append_event(store, a.run_id, a.event_type, fields, wait=a.wait)
    except EventFormatError as exc:
        texts = {name: value for name, value, as_text in a.fields if as_text}
        hinted = _json_hints(store, a.event_type, texts, exc.problems)
        if hinted == list(exc.problems):
            raise
        raise EventFormatError(hinted, run_id=exc.run_id, sequence=exc.sequence) from None


#: What a JSON Schema type asks for, in words.
_WANTS = {
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
    "null": "null",
}


def _json_hints(
    store: EventStore, event_type: str, texts: dict[str, str], problems: Sequence[str]
) -> list[str]:
    """`problems`, where a field given as text (`amount=25000`) wants another JSON type:
    its problem says so, and how to write it (`field 'amount' wants an integer: write
    amount:=25000`)."""
    cls = store.reducer.table.event_types.classes.get(event_type)
    if cls is None or not texts:
        return list(problems)
    properties = cls.model_json_schema().get("properties", {})
    out = []
    for problem in problems:
        name = next((n for n in texts if problem.startswith(f"field '{n}'")), None)
        wants = _json_types(properties.get(name, {})) if name is not None else []
        if name is None or not wants or "string" in wants or not _is_json(texts[name]):
            out.append(problem)  # the text was meant as text, or is no JSON either
            continue
        words = " or ".join(_WANTS.get(t, t) for t in wants)
        out.append(f"field '{name}' wants {words}: write {name}:={texts[name]}")
    return out


def _is_json(text: str) -> bool:
    try:
        parse_json(text)
    except ValueError:
        return False
    return True


def _json_types(prop: dict[str, Any]) -> list[str]:
    """The JSON types a field's schema allows (`anyOf` flattened), in its order."""
    found = [prop["type"]] if isinstance(prop.get("type"), str) else []
    for alternative in prop.get("anyOf", ()):
        found += _json_types(alternative)
    return found


def _pause(store: EventStore, a: argparse.Namespace) -> RunRecord:
    return control.pause(store, a.run_id, a.reason, wait=a.wait)


def add_parsers(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register cancel, pause, resume, append and runs."""
    p = command(
        subparsers, "cancel", "ask a run to stop; calls in flight settle, then it is cancelled",
        'agentfsm cancel run_123 --reason "customer hung up" --store runs.db',
    )  # fmt: skip
    run_argument(p)
    p.add_argument("--reason", type=_args.text, help="why")
    p.add_argument("--requested-by", type=_args.identity, help="who asked")
    p.set_defaults(handler=steer("cancel", _cancel))

    p = command(
        subparsers, "pause", "pause a run between steps (waiting for input or a callback)",
        'agentfsm pause run_123 --reason "waiting for the customer" --store runs.db',
    )  # fmt: skip
    run_argument(p)
    p.add_argument("--reason", type=_args.text, required=True, help="what the run waits for")
    wait_argument(p)
    p.set_defaults(handler=steer("pause", _pause))

    p = command(
        subparsers, "resume", "resume a paused run; a worker or Runner.drive then drives it",
        "agentfsm resume run_123 --store runs.db",
    )  # fmt: skip
    run_argument(p)
    # The other half of `pause`: it only makes the run runnable, it drives nothing.
    p.set_defaults(handler=steer("resume", lambda s, a: control.resume(s, a.run_id)))

    p = command(
        subparsers, "append", "append one event of the run's table (a lifecycle's own, too)",
        "agentfsm append t-1 ticket.escalated escalated_to=tier-2 priority=urgent "
        "--store runs.db\n  agentfsm append t-1 ticket.scored score:=0.8 --store runs.db",
    )  # fmt: skip
    run_argument(p)
    p.add_argument("event_type", type=_args.identity, metavar="EVENT_TYPE")
    p.add_argument(
        "fields", nargs="*", metavar="FIELD=TEXT|FIELD:=JSON", type=_field,
        help="the event's own fields: text as given, or a JSON value after :=",
    )  # fmt: skip
    wait_argument(p)
    p.set_defaults(handler=steer("append", _append))

    p = command(
        subparsers, "runs", "list the runs in a store with their status (no replay)",
        "agentfsm runs --store runs.db --status waiting_approval",
    )  # fmt: skip
    add_store_argument(p, table=False)
    p.add_argument(
        "--status", type=_args.identity, action="append",
        help="only runs in this status (repeatable)",
    )  # fmt: skip
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=_runs)


def _runs(args: argparse.Namespace) -> int:
    with opened_store(args.store, "runs") as store:
        infos = store.runs(status=args.status)
    if args.format == "json":
        rows = [
            {
                "run_id": i.run_id,
                "status": i.status,
                "version": i.version,
                "updated_at": i.updated_at,
            }
            for i in infos
        ]
        print_json(lambda: rows, "runs")
    else:
        ids = [shown(i.run_id) for i in infos]
        width = max(map(len, ids), default=0)
        for run_id, i in zip(ids, infos, strict=True):
            status = shown(i.status)
            updated = shown(str(i.updated_at))
            print(f"{run_id:<{width}}  {status:<16}  version {i.version:<5}  {updated}")
    return 0
