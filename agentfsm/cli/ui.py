"""`agentfsm ui`: a local web UI over a store (or a log file): runs, approvals, tables.

Binds 127.0.0.1 unless told otherwise (with a warning on stderr for any other address);
prints the URL that signs the browser in with the token every change needs. `--read-only`
serves no changes at all. See docs/ui.md.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

from agentfsm.cli import _args
from agentfsm.cli._common import PROG, Parser, UsageError, load_tables
from agentfsm.cli._output import shown
from agentfsm.cli._store import add_store_argument, store_label, store_opener
from agentfsm.errors import EventFormatError

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction[Parser]) -> None:
    """Register `agentfsm ui`."""
    p = subparsers.add_parser(
        "ui",
        help="serve a local web UI: runs, a run's timeline and path, approvals, tables",
        description="Serve a local web UI over a store (or a JSON Lines log, read-only): the "
        "runs, each run's timeline, actions, limits and path on its table, an approvals inbox, "
        "and every known table with its static check. Needs the ui extra.",
        epilog="examples:\n  agentfsm ui --store runs.db\n"
        "  agentfsm ui --store postgresql://localhost/agents --read-only\n"
        "  agentfsm ui --log events.jsonl",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_store_argument(p, table=False)
    p.add_argument(
        "--log", type=_args.path, metavar="EVENTS.jsonl",
        help="serve the runs of a log file instead of a store (read-only; a refused event "
        "is shown where it broke the lifecycle)",
    )  # fmt: skip
    p.add_argument(
        "--table", action="append", default=[], metavar="MODULE:ATTR",
        help="a table to know beside the registered ones (repeatable; with --log, the first "
        "is the log's)",
    )  # fmt: skip
    p.add_argument("--host", default="127.0.0.1", type=_args.text, help="default: 127.0.0.1")
    p.add_argument("--port", type=int, default=8765, help="default: 8765 (0: any free port)")
    p.add_argument(
        "--token", type=_args.text,
        help="the token changes need: 22 to 256 characters of A-Z a-z 0-9 - _ (default: "
        "$AGENTFSM_UI_TOKEN, else a fresh random one)",
    )  # fmt: skip
    p.add_argument("--read-only", action="store_true", help="serve no changes at all")
    p.add_argument(
        "--processes", type=_processes, default=1, metavar="N",
        help="server processes sharing the port (default: 1; 1 to 64). One process "
        "answers a few hundred requests a second (the GIL); two about three times as many",
    )  # fmt: skip
    p.add_argument(
        "--identity-header", metavar="NAME", type=_args.text,
        help="the request header in which your proxy names the signed-in person (e.g. "
        "X-Forwarded-User): approvers and cancels are recorded under that name, and a "
        "change without it is refused. Only behind a proxy that sets it and strips it "
        "from clients' requests",
    )  # fmt: skip
    p.set_defaults(handler=_ui)


def _processes(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_PROCESSES:
        raise argparse.ArgumentTypeError(f"'{shown(value)}' is not a whole number from 1 to 64")
    return number


#: The most server processes `--processes` starts.
MAX_PROCESSES = 64

#: An HTTP header name as proxies write them.
_HEADER = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,99}")


def _ui(args: argparse.Namespace) -> int:
    try:
        from agentfsm.ui import LogSource, Source, UIConfig, create_app
        from agentfsm.ui._security import TOKEN_ENV, TOKEN_RULE, make_token, token_problem
        from agentfsm.ui._server import (
            allowed_hosts,
            bind,
            can_fork,
            is_loopback,
            serve,
            serve_forked,
        )
    except ImportError as exc:
        raise UsageError(
            f"{PROG} ui: the UI needs `pip install 'agentfsm[ui]'` ({exc.name} is missing)"
        ) from None
    # Checked before anything is opened. An empty variable is no token, as an empty
    # AGENTFSM_STORE is no store; an empty --token is a token given, and too short.
    token: str | None = args.token
    where = "--token"
    if token is None:
        where, token = f"${TOKEN_ENV}", os.environ.get(TOKEN_ENV) or None
    if token is not None and (problem := token_problem(token)) is not None:
        raise UsageError(
            f"{PROG} ui: {where} {problem}; {TOKEN_RULE}, or leave it out for a fresh one"
        )
    header = args.identity_header
    if header is not None and not _HEADER.fullmatch(header):
        raise UsageError(
            f"{PROG} ui: --identity-header '{shown(header)}' is not a header name "
            "(letters, digits and '-', like X-Forwarded-User)"
        )
    if args.processes > 1 and not can_fork():
        raise UsageError(f"{PROG} ui: --processes needs a platform that forks (Linux, macOS)")
    tables = list(load_tables(args.table, "ui"))
    if args.log is not None:
        if args.store is not None:
            raise UsageError(f"{PROG} ui: give --store or --log, not both")
        if not args.log.is_file():
            raise UsageError(f"{PROG} ui: no log file at '{shown(str(args.log))}'")
        try:
            source: Source = LogSource(args.log, *tables[:1])
        except EventFormatError as exc:  # a line the reader refused: the log is unreadable
            raise UsageError(f"{PROG} ui: '{shown(str(args.log))}': {exc}") from None
        read_only = True
    else:
        source = Source(
            store_opener(args.store, "ui"), tables=tables, label=store_label(args.store)
        )
        read_only = args.read_only
    token = token or make_token()
    if not is_loopback(args.host):
        print(
            f"{PROG} ui: warning: listening on {shown(args.host)}, not only on this machine: "
            "anyone who can reach it can read every run; changes need the token",
            file=sys.stderr,
        )
    try:
        sock = bind(args.host, args.port)
    except OSError as exc:
        raise UsageError(
            f"{PROG} ui: cannot listen on {shown(args.host)}:{args.port}: {exc.strerror}"
        ) from None
    host, port = sock.getsockname()[:2]
    shown_host = f"[{host}]" if ":" in host else host
    base = f"http://{shown_host}:{port}/"
    config = UIConfig(
        token=token, read_only=read_only, allowed_hosts=allowed_hosts(args.host),
        identity_header=header,
    )  # fmt: skip
    app = create_app(source, config)
    mode = " (read-only)" if read_only else ""
    print(f"{PROG} ui: serving {shown(source.label)} at {base}{mode}", flush=True)
    if not read_only:
        print(f"{PROG} ui: open {base}login?token={token} to sign in (changes need it)", flush=True)
    try:
        if args.processes == 1:
            serve(app, sock)
            return 0
        return serve_forked(app, sock, args.processes)
    finally:
        source.close()
        sock.close()
