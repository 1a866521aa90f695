"""Output files written whole or not at all.

A command writing `-o FILE` that fails half-way (a store that stops reading back, a full
disk, Ctrl-C) must not leave a truncated file that looks complete: the next `validate`
would pass it. So output goes to a temporary file beside the target, is synced, and is
renamed over the target only when the command succeeded; a rename within one directory is
atomic on POSIX, and a failure removes the temporary file and leaves any old target as it
was.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from agentfsm.cli._common import PROG, UsageError

__all__ = ["replacing"]


@contextmanager
def replacing(target: Path, command: str) -> Iterator[BinaryIO]:
    """A binary handle whose content replaces `target` if the block ends without error.

    A link is followed, as `>` would: the file it names is replaced, the link stays. A
    target that exists and is not a regular file (`/dev/stdout`, a named pipe) is written
    in place: there is no file to replace, and renaming over it would swap it for one.

    Raises:
        UsageError: the file cannot be created, written or renamed.
    """
    if target.exists() and not target.is_file():
        with _failing_as_usage(target, command), target.open("wb") as handle:
            yield handle
        return
    real = Path(os.path.realpath(target))
    temporary = real.with_name(f".{real.name}.{secrets.token_hex(6)}.tmp")
    with _failing_as_usage(target, command):
        # O_EXCL: never write through a file someone else put there; 0o666 less the umask
        # is what a plain `open(target, "w")` would give a new file.
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with _failing_as_usage(target, command):
            with os.fdopen(fd, "wb") as handle:
                _keep_mode(real, handle)
                yield handle
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, real)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@contextmanager
def _failing_as_usage(target: Path, command: str) -> Iterator[None]:
    try:
        yield
    except BrokenPipeError:
        raise  # `-o /dev/stdout | head`: the reader left, `main` ends quietly
    except OSError as exc:
        raise UsageError(f"{PROG} {command}: cannot write '{target}': {exc.strerror}") from None


def _keep_mode(target: Path, handle: BinaryIO) -> None:
    # Replacing a file must not widen who may read it (an export over a 0600 file).
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except OSError:
        return
    os.fchmod(handle.fileno(), mode)
