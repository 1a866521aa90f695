"""The `agentfsm` command line.

Each subcommand lives in its own module with an `add_parser(subparsers)` that declares its
arguments and sets its handler; `main` parses and dispatches.

Exit status: 0 done; 1 a check failed (an illegal log, a refused decision, stale diagrams);
2 the command could not do its job: bad arguments, unreadable or empty input, a line that is
not an event, output that cannot be written as JSON, a store that fails, a missing tool.
Failures print one line to stderr, never a traceback: what no handler foresaw is reported
by `main` as one line naming the command and the error's type. A reader that closes the
output early (`| head`) ends the command quietly with 141, as SIGPIPE would.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack, redirect_stderr
from importlib.metadata import PackageNotFoundError, version

from agentfsm.cli import (
    check_table,
    control,
    decide,
    diagram,
    diff,
    export,
    fork,
    inspect_run,
    jobs,
    migrate,
    rekey,
    replay,
    report,
    schema,
    ui,
    validate,
    verify,
    worker,
)
from agentfsm.cli._common import PROG, Handler, Parser, UsageError
from agentfsm.cli._output import error_text, shown
from agentfsm.errors import AgentFSMError

__all__ = ["UsageError", "build_parser", "main"]

#: The status a shell reports for a process killed by SIGPIPE (128 + 13).
_SIGPIPE_STATUS = 128 + signal.SIGPIPE

_SUBCOMMANDS: tuple[Callable[[argparse._SubParsersAction[Parser]], None], ...] = (
    validate.add_parser,
    replay.add_parser,
    inspect_run.add_parser,
    diagram.add_parser,
    schema.add_parser,
    check_table.add_parser,
    decide.add_parsers,
    control.add_parsers,
    migrate.add_parser,
    fork.add_parser,
    diff.add_parser,
    export.add_parser,
    verify.add_parser,
    rekey.add_parser,
    report.add_parser,
    ui.add_parser,
    worker.add_parsers,
    jobs.add_parser,
)


def build_parser() -> argparse.ArgumentParser:
    """The `agentfsm` argument parser with every subcommand registered."""
    parser = Parser(
        prog=PROG,
        description="agentfsm: a strictly validated lifecycle for AI-agent runs.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    subparsers = parser.add_subparsers(
        title="commands", dest="command", required=True, metavar="COMMAND"
    )
    for add in _SUBCOMMANDS:
        add(subparsers)
    return parser


def _version() -> str:
    # The installed metadata's version, which the build reads from `agentfsm.__version__` (the
    # one source; importing the top level from here would be an import back up the layers).
    try:
        return version("agentfsm")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 check failed, 2 unusable).

    Args:
        argv: the arguments after the program name (default: `sys.argv[1:]`).
    """
    with ExitStack() as stack:
        if sys.stderr is None:  # started with stderr closed (`2>&-`): messages go nowhere,
            stack.enter_context(redirect_stderr(stack.enter_context(open(os.devnull, "w"))))
        if sys.stdout is None:  # and with stdout closed (`>&-`), there is nowhere to answer
            return _fail(f"{PROG}: standard output is closed")
        try:
            code = _dispatch(argv)
            sys.stdout.flush()  # inside the try: a reader gone shows up here as often as not
        except BrokenPipeError:
            return _reader_gone()
        except KeyboardInterrupt:
            return 128 + signal.SIGINT  # what a shell reports for Ctrl-C; no traceback
        return code
    raise AssertionError("unreachable")  # for mypy: an ExitStack might swallow the return


def _dispatch(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        return _fail(f"{exc} (see `{exc.prog} --help`)")
    except SystemExit as exc:  # --help and --version print, then exit 0 through argparse
        return exc.code if isinstance(exc.code, int) else 0
    handler: Handler = args.handler
    command = f"{PROG} {args.command}"
    try:
        return handler(args)
    except UsageError as exc:
        return _fail(str(exc))
    except BrokenPipeError:
        raise
    except (AgentFSMError, OSError) as exc:
        return _fail(f"{command}: error: {error_text(exc)}")
    except UnicodeEncodeError as exc:  # a terminal whose encoding cannot show the text
        return _fail(
            f"{command}: cannot write to {exc.encoding} output; set PYTHONIOENCODING=utf-8"
        )
    except Exception as exc:  # noqa: BLE001 - the last resort: one line, never a traceback
        return _fail(f"{command}: unexpected {type(exc).__name__}: {error_text(exc)}")


def _fail(message: str) -> int:
    # `shown` is idempotent, so text escaped where it was quoted is not escaped twice; this
    # catches whatever reached a message unescaped (argv in argparse's own messages).
    print(shown(message), file=sys.stderr)
    return 2


def _reader_gone() -> int:
    # The reader of our output left (`agentfsm export | head`): stop quietly, as a tool
    # killed by SIGPIPE does. Point stdout at /dev/null so the interpreter's last flush of
    # what is still buffered does not fail again and print "Exception ignored".
    try:
        fd = sys.stdout.fileno()
    except (OSError, ValueError):  # not a real file (a test's capture): nothing to flush
        return _SIGPIPE_STATUS
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)
    return _SIGPIPE_STATUS
