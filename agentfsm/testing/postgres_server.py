"""A throwaway PostgreSQL server for tests and benchmarks: `initdb` + `pg_ctl`, nothing else.

The server lives in a fresh temporary directory, listens on a free port on 127.0.0.1 only
(and a unix socket in the same directory), and is stopped and deleted by `stop()`.
PostgreSQL refuses to run as root, so when we are root the server binaries run as the
`postgres` user through `runuser -u postgres --` (only they do: the Python process stays
as it is, since a venv under /root is unreadable to that user). About one second to
start on a laptop-class machine.

Why not pytest-postgresql: as root it needs a wrapper around `pg_ctl` and changes to the
permissions of pytest's temporary directories; these forty lines do the same with no
special cases hidden in a plugin.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import attrs

__all__ = [
    "PostgresServer",
    "find_postgres_bindir",
    "postgres_server",
    "start_postgres",
    "unavailable_reason",
]

# Durability off: the test data is thrown away, and it makes a commit ~10x cheaper.
_FAST = ("-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")


def find_postgres_bindir() -> Path | None:
    """Where `initdb` and `pg_ctl` are: `$AGENTFSM_PG_BINDIR`, `pg_config --bindir`, the
    newest `/usr/lib/postgresql/*/bin`, or PATH; None when there are none."""
    candidates: list[Path] = []
    if env := os.environ.get("AGENTFSM_PG_BINDIR"):
        candidates.append(Path(env))
    if pg_config := shutil.which("pg_config"):
        try:
            out = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
            candidates.append(Path(out))
        except (OSError, subprocess.SubprocessError):
            pass
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates.extend(versions)
    if initdb := shutil.which("initdb"):
        candidates.append(Path(initdb).resolve().parent)
    for bindir in candidates:
        if (bindir / "initdb").is_file() and (bindir / "pg_ctl").is_file():
            return bindir
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@attrs.frozen
class PostgresServer:
    """A running throwaway server.

    Attributes:
        bindir: where its binaries are.
        root: its temporary directory (data directory, log, socket).
        port: its TCP port on 127.0.0.1.
        run_as: the command prefix its binaries run under (`runuser ...` as root).
    """

    bindir: Path
    root: Path
    port: int
    run_as: tuple[str, ...]

    @property
    def dsn(self) -> str:
        """A libpq connection string for the `postgres` database as user `postgres`."""
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.root / "server.log"

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its directory."""
        try:
            _run(self.run_as, self.bindir / "pg_ctl", "-D", self.root / "data", "-m", "fast")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def _run(run_as: Sequence[str], binary: Path, *args: object, start: bool = False) -> None:
    # pg_ctl's command comes last so `stop`/`start` follow the options, as pg_ctl wants.
    cmd = [*run_as, str(binary), *(str(a) for a in args)]
    if binary.name == "pg_ctl":
        cmd += ["-w", "-t", "30", "start" if start else "stop"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        )


def start_postgres(
    *,
    bindir: Path | None = None,
    durable: bool = False,
    listen: Sequence[str] = (),
    trust: Sequence[str] = (),
) -> PostgresServer:
    """Create and start a throwaway server.

    Args:
        bindir: the server binaries (found with `find_postgres_bindir` when None).
        durable: keep PostgreSQL's default durability (fsync on every commit), for
            benchmarks; tests leave it off.
        listen: addresses to listen on besides 127.0.0.1 (addresses of this machine, e.g.
            a veth end a test put a worker's network namespace behind).
        trust: networks (CIDR) whose clients connect without a password, besides localhost.

    Raises:
        RuntimeError: no binaries, no `postgres` user while running as root, or the
            server did not start (the message holds its output).
    """
    bindir = bindir or find_postgres_bindir()
    if bindir is None:
        raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl) were found")
    root = Path(tempfile.mkdtemp(prefix="agentfsm-pg-"))
    run_as: tuple[str, ...] = ()
    if os.geteuid() == 0:
        try:
            shutil.chown(root, "postgres", "postgres")
        except LookupError:
            shutil.rmtree(root, ignore_errors=True)
            raise RuntimeError(
                "running as root, PostgreSQL needs an unprivileged 'postgres' user to run as"
            ) from None
        run_as = ("runuser", "-u", "postgres", "--")
    try:
        _run(
            run_as,
            bindir / "initdb",
            "-D",
            root / "data",
            "-U",
            "postgres",
            "-A",
            "trust",
            "--no-sync",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        )
        if trust:
            hba = root / "data" / "pg_hba.conf"
            lines = "".join(f"host all all {net} trust\n" for net in trust)
            hba.write_text(hba.read_text() + lines)
        last: RuntimeError | None = None
        for _ in range(3):  # the free port can be taken between choosing and binding it
            port = _free_port()
            addresses = ",".join(("127.0.0.1", *listen))
            options = ["-p", str(port), "-c", f"listen_addresses={addresses}", "-k", str(root)]
            if not durable:
                options.extend(_FAST)
            try:
                _run(
                    run_as,
                    bindir / "pg_ctl",
                    "-D",
                    root / "data",
                    "-l",
                    root / "server.log",
                    "-o",
                    " ".join(options),
                    start=True,
                )
            except RuntimeError as exc:
                last = exc
                continue
            return PostgresServer(bindir, root, port, run_as)
        assert last is not None
        raise last
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


@contextmanager
def postgres_server(
    *,
    bindir: Path | None = None,
    durable: bool = False,
    listen: Sequence[str] = (),
    trust: Sequence[str] = (),
) -> Iterator[PostgresServer]:
    """`start_postgres` as a context manager: the server is stopped and deleted on exit."""
    server = start_postgres(bindir=bindir, durable=durable, listen=listen, trust=trust)
    try:
        yield server
    finally:
        server.stop()


def unavailable_reason(
    environ: Mapping[str, str] = os.environ,
    find_bindir: Callable[[], Path | None] = find_postgres_bindir,
) -> str | None:
    """Why PostgreSQL tests cannot run here, with how to make them run; None when they can.

    They can when `AGENTFSM_TEST_POSTGRES_DSN` names a server, or when psycopg and the
    server binaries are installed (a throwaway server is started).
    """
    if environ.get("AGENTFSM_TEST_POSTGRES_DSN"):
        return None
    why: str | None = None
    try:
        import psycopg  # noqa: F401  (only whether it imports matters)
    except ImportError:
        why = "psycopg is not installed (pip install 'agentfsm[postgres]')"
    if why is None and find_bindir() is None:
        why = "no PostgreSQL server binaries were found"
    if why is None:
        return None
    return (
        f"{why}; install them (Debian: apt-get install postgresql-15) or set "
        "AGENTFSM_TEST_POSTGRES_DSN='host=... user=... dbname=...' to use a running server"
    )
