"""Who a lease row names, and whether that process is gone (so its lease may be taken over).

A lease row names its holder's process: its host, its pid, and a key telling, on that host,
the very process (the boot id, the pid namespace and the process's start time, from `/proc`).
On the same host, boot and pid namespace, a process is known gone when its pid runs no more,
runs another program (its start time differs: the pid was reused), or is a zombie. Of a
process anywhere else nothing is known: only its lease's heartbeat says whether it lives.
"""

from __future__ import annotations

import os
import socket

import attrs

__all__ = ["Process", "gone", "this_process"]


@attrs.frozen
class Process:
    """A process as a lease row names it: enough to tell, on its own host, that it is gone.

    Attributes:
        host: the host's name.
        pid: the process id.
        key: `boot id/pid namespace/start time` where `/proc` tells them (Linux), else None:
            then only the heartbeat says whether the holder is alive.
    """

    host: str
    pid: int
    key: str | None


_THIS: Process | None = None


def this_process() -> Process:
    """This process (read once per process: a forked child reads its own)."""
    global _THIS
    found = _THIS
    if found is None or found.pid != os.getpid():
        pid = os.getpid()
        machine, stat = _machine(), _stat(pid)
        key = None if machine is None or stat is None else f"{machine}/{stat[1]}"
        found = _THIS = Process(socket.gethostname(), pid, key)
    return found


def _machine() -> str | None:
    """This boot and pid namespace: where a pid means the same process as here."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        space = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    return f"{boot}/{space}"


def _stat(pid: int) -> tuple[str, str] | None:
    """A process's state letter and start time (clock ticks since boot), or None if none runs."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after the command, which may hold spaces
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def gone(host: str | None, pid: int | None, key: str | None) -> bool:
    """Whether the process a lease row names is known to be gone (see the module docstring).

    Only a process of this host, boot and pid namespace can be known gone; of any other,
    nothing is known, and only its heartbeat counts.
    """
    if key is None or pid is None or host is None:
        return False
    me = this_process()
    machine, _, started = key.rpartition("/")
    if host != me.host or me.key is None or not me.key.startswith(machine + "/"):
        return False
    stat = _stat(pid)
    if stat is None:
        return True
    state, start = stat
    return state in ("Z", "X") or start != started
