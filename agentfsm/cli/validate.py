"""`agentfsm validate`: check a JSON Lines log against the wire format, the table and limits.

Exit status: 0 every event legal; 1 a well-formed event breaks the lifecycle (illegal move,
sequence gap or repeat, unknown or reused action id, a changed approved call, a guard limit
overrun); 2 a line that is not a valid event, a log with no events (unless --allow-empty),
or bad usage.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

from pydantic import ValidationError

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, load_tables
from agentfsm.cli._io import LineCounter, Style, stream_lines
from agentfsm.cli._log_table import table_of_log
from agentfsm.cli._output import print_json, shown
from agentfsm.cli._parallel import auto_jobs, validate_in_parallel
from agentfsm.events.models import Limits, timestamp_problem
from agentfsm.guards.base import Guard
from agentfsm.guards.limits import guards_from_limits
from agentfsm.guards.loops import LoopDetector
from agentfsm.reducers.reduce import Reducer
from agentfsm.reducers.validate import Finding, ValidationReport, validate_lines

__all__ = [
    "add_allow_empty", "add_log_arguments", "add_parser", "guards_from_args", "opened_log",
    "read_log",
]  # fmt: skip

_EXAMPLE = """\
examples:
  agentfsm validate events.jsonl
  agentfsm validate events.jsonl --max-turns 8 --max-tokens 20000 --all --format json
  cat events.jsonl | agentfsm validate - --table myapp.lifecycle:TABLE
"""


def add_log_arguments(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """The arguments every log-reading command shares: the file, the table, the format
    (`optional`: the file may be left out, for a command that can read a store instead)."""
    p.add_argument(
        "file", type=_args.path, metavar="FILE", nargs="?" if optional else None,
        help="JSON Lines events; - reads stdin",
    )  # fmt: skip
    p.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    p.add_argument(
        "--table", metavar="MODULE:ATTR", action="append",
        help="the table to check against, or a list of versions (repeatable: once per "
        "version; the one the log's first run names is used); default: the one the log's "
        "first run.started names, found among the registered tables",
    )  # fmt: skip
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar on stderr")


def add_allow_empty(p: argparse.ArgumentParser) -> None:
    """`--allow-empty`: a log without events (or without the run asked for) passes."""
    p.add_argument(
        "--allow-empty",
        action="store_true",
        help="exit 0 on a log with no events (or no --run-id run); by default that is exit 2",
    )


def opened_log(
    args: argparse.Namespace, command: str, guards: list[Guard] | None = None
) -> tuple[Iterator[str], Reducer, LineCounter]:
    """The lines of `args.file`, the reducer to fold them with, and the line counter.

    The table is `--table` when it names one (the log is checked against it, whatever its
    runs name); else the one the log's first `run.started` names (`table_of_log`), among
    the versions `--table` names when it names several; the reducer checks `guards` too.
    """
    counter = LineCounter(command)
    lines = counter.count(stream_lines(args.file, command, quiet=args.quiet))
    given = load_tables(args.table, command)
    assumed: list[bool] = []
    if len(given) == 1:
        table = given[0]
    else:
        run_id = getattr(args, "run_id", None)
        table, lines = table_of_log(lines, command, given, run_id, assumed)
    # Read by `validate`'s summary: a log that names no table is never checked silently.
    args.table_assumed = any(assumed)
    return lines, Reducer(table, guards or (), tables=given), counter


def read_log(
    args: argparse.Namespace,
    command: str,
    guards: list[Guard] | None = None,
    *,
    log: tuple[Iterator[str], Reducer, LineCounter] | None = None,
    **options: Any,
) -> tuple[ValidationReport, Reducer]:
    """Fold the log of `args.file` (or `log`, as `opened_log` gives it: another source's
    lines); a line no check foresaw, or nothing to check, is exit 2.

    Raises:
        UsageError: a line made the library fail outright, or the log held no events (no
            events of `--run-id`) and `--allow-empty` is off.
    """
    lines, reducer, counter = log if log is not None else opened_log(args, command, guards)
    with counter.checking():
        report = validate_lines(lines, reducer=reducer, run_id=args.run_id, **options)
    if report.runs or report.findings or args.allow_empty:
        return report, reducer
    # Nothing checked is more likely a wrong file, an empty pipe or a mistyped run id than
    # a pass: say so (a pipeline that expects nothing passes --allow-empty).
    if args.run_id is not None:
        raise UsageError(f"{PROG} {command}: the log has no run '{shown(args.run_id)}'")
    raise UsageError(f"{PROG} {command}: the input held no events (--allow-empty accepts that)")


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm validate`."""
    p = subparsers.add_parser(
        "validate",
        help="check a log: wire format, table, ledger rules and limits",
        description=(
            "Check every line of a JSON Lines log against the wire format and every run "
            "(several may be interleaved) against the table, the reducer's rules and any "
            "limits given. Exit 0 legal, 1 a lifecycle error, 2 a line that is not an event "
            "or a log with no events."
        ),
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_log_arguments(p)
    p.add_argument("--all", action="store_true", help="report every run's first error")
    p.add_argument("--run-id", type=_args.run_id, help="check only this run")
    p.add_argument(
        "--jobs", type=_jobs, default="auto", metavar="N|auto",
        help="processes to check a large log with, runs split among them (auto: every core, "
        "up to 4, for a file of 16 MiB or more; a log with a finding is checked again in one "
        "process, so its report is the same)",
    )  # fmt: skip
    add_allow_empty(p)
    limits = p.add_argument_group("limits (audit a log as if these guards had been on)")
    limits.add_argument("--max-turns", type=int, metavar="N", help="model calls per run")
    limits.add_argument(
        "--max-calls-per-decision", type=int, metavar="N", help="calls one model answer proposes"
    )
    limits.add_argument("--max-tokens", type=int, metavar="N", help="tokens per run")
    limits.add_argument("--max-cost", type=float, metavar="X", help="cost per run")
    limits.add_argument("--deadline", metavar="ISO", help="an RFC 3339 time with an offset")
    limits.add_argument(
        "--loop-threshold", type=int, metavar="K", help="K identical calls with no progress"
    )
    p.set_defaults(handler=_validate)


def guards_from_args(args: argparse.Namespace, command: str) -> list[Guard]:
    """The guards of the limit flags a command declares (checked before any input is read).

    Raises:
        UsageError: a limit flag's value is not a limit.
    """
    guards: list[Guard] = []
    given = {
        key: getattr(args, key, None)
        for key in ("max_turns", "max_calls_per_decision", "max_tokens", "max_cost", "deadline")
    }
    chosen = {k: v for k, v in given.items() if v is not None}
    if chosen:
        try:
            limits = Limits.model_validate(chosen)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            flag = "--" + str(first["loc"][0]).replace("_", "-")
            msg = (
                timestamp_problem(first["input"])
                if first["type"] == "timestamp"
                else str(first["msg"]).removeprefix("Value error, ")
            )
            raise UsageError(f"{PROG} {command}: {flag}: {msg}") from None
        guards.extend(guards_from_limits(limits))
    threshold = getattr(args, "loop_threshold", None)
    if threshold is not None:
        if threshold < 2:
            raise UsageError(f"{PROG} {command}: --loop-threshold must be at least 2")
        guards.append(LoopDetector(threshold=threshold, window=max(10, threshold)))
    return guards


def _validate(args: argparse.Namespace) -> int:
    guards = guards_from_args(args, "validate")
    found = _in_parallel(args, guards)
    report, reducer = found or read_log(args, "validate", guards, keep_going=args.all)
    if args.format == "json":
        print_json(lambda: _as_json(report), "validate")
    else:
        _print_text(report, reducer, assumed=getattr(args, "table_assumed", False))
    return report.exit_code


def _in_parallel(
    args: argparse.Namespace, guards: list[Guard]
) -> tuple[ValidationReport, Reducer] | None:
    """The report of a clean log checked by several processes (`--jobs`), else None: then
    the log is read again in one process, which gives every report with a finding."""
    if args.all or args.run_id is not None or str(args.file) == "-":
        return None
    jobs = args.jobs
    if jobs == "auto":
        try:
            jobs = auto_jobs(args.file.stat().st_size if args.file.is_file() else None)
        except OSError:
            return None  # the one-process read says what is wrong with the file
    if jobs <= 1:
        return None
    lines, reducer, counter = opened_log(args, "validate", guards)
    with counter.checking():
        report = validate_in_parallel(lines, reducer, jobs)
    if report is None or not report.runs:
        return None
    return report, reducer


def _jobs(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {value}")
    return value


def _as_json(report: ValidationReport) -> dict[str, Any]:
    findings = [f.to_json() for f in report.findings]
    out: dict[str, Any] = {
        "ok": report.ok,
        "runs": [r.to_json() for r in report.runs],
        "error": findings[0] if findings else None,
    }
    if len(findings) > 1:
        out["errors"] = findings
    return out


def _print_text(report: ValidationReport, reducer: Reducer, *, assumed: bool = False) -> None:
    style = Style(sys.stdout)
    ids = [shown(r.run_id) for r in report.runs]
    width = max(map(len, ids), default=0)
    for run_id, run in zip(ids, report.runs, strict=True):
        terminal = reducer.table.is_terminal(run.status)
        reason = f" ({shown(run.stop_reason)})" if run.stop_reason else ""
        status = style.status(shown(run.status), terminal) + reason
        print(f"{run_id:<{width}}  {status}  version {run.version}")
    for finding in report.findings:
        _print_finding(finding, style)
    verdict = style.good("ok") if report.ok else style.bad(f"{len(report.findings)} error(s)")
    print(
        f"{verdict}: {report.events:,} events in {len(report.runs)} run(s), {report.lines:,} lines"
    )
    if assumed:
        print(
            f"note: no run.started in the log names its table: checked against the default "
            f"table '{reducer.table.name}' (give --table for another)"
        )


def _print_finding(f: Finding, style: Style) -> None:
    where = "" if f.is_format else f" at line {f.line}"  # a format message names its line
    print(style.bad(f"error ({f.kind}){where}: ") + shown(f.message))
    print(style.dim(f"  line {f.line}: ") + shown(f.text))
    if f.state is not None:
        state, event = shown(f.state), shown(str(f.event))
        print(style.dim("  state: ") + state + style.dim("   event: ") + event)
        if f.allowed or f.kind == "illegal_transition":
            allowed = ", ".join(map(shown, f.allowed)) if f.allowed else "none"
            print(style.dim("  allowed: ") + allowed)
    if f.guard is not None:
        print(style.dim("  guard: ") + shown(f"{f.guard}: {f.detail}"))
