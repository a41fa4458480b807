"""End every process a collection started, and undo a stop a killed py-spy among them caused.

A py-spy killed in the middle of a dump leaves its target stopped (the ptrace attach queues a stop;
the kernel's detach at the tracer's death does not resume it). We resume exactly those: targets whose
tracer was one of the processes we kill, and that are stopped afterwards (DESIGN principle 1; issue 15
item 6). Everything else keeps its state, an operator's SIGSTOP included.

It reads the machine's /proc (``_ptrace.PROC``), never a ``ctx.proc_root``: what it ends are this
process's own children, and a test's fake tree must never choose what gets killed.
"""

from __future__ import annotations

import os
import signal
import time

from vllmdiag.probes._ptrace import PROC, resume_stopped, tracer_tid
from vllmdiag.runtime.procstat import Stat, read_stat

WAIT_S = 0.5  # for killed tracers to exit (their ptrace detach happens in exit)


def kill_session(sid: int) -> None:
    """SIGKILL every process of the child's session (the child included)."""
    end_processes(_session(sid))


def end_processes(members: dict[int, int]) -> None:
    """SIGKILL these processes' groups (pid -> pgid), then resume what a killed py-spy among them left stopped."""
    if not members:
        return
    traced = set(_traced_by(members))
    # Our own processes are stopped first, then looked at again: a py-spy that attached between the look
    # above and its kill would leave its target stopped, unseen (seen in CI under strace and load).
    for pid in members:
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
    traced |= set(_traced_by(members))
    own = os.getpgid(0)
    for pid, pgid in members.items():
        try:
            if pgid != own:
                os.killpg(pgid, signal.SIGKILL)
            elif pid != os.getpid():  # a child left in our own group (Python 3.10 has no process_group)
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if traced:
        _wait_exited(list(members))
        resume_stopped(sorted(traced), PROC)


def _session(sid: int) -> dict[int, int]:
    """pid -> pgid of every process whose session is ``sid`` (our child is unreaped: its id is not reused)."""
    out: dict[int, int] = {}
    for name in os.listdir(PROC):
        if name.isdigit():
            stat = _stat(int(name))
            if stat and stat.session == sid:
                out[int(name)] = stat.pgid
    return out


def own_children() -> dict[int, int]:
    """pid -> pgid of the children of this process, from every thread (probe threads start them)."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir(PROC / "self" / "task")
    except OSError:
        return out
    for tid in tids:
        try:
            kids = (PROC / "self" / "task" / tid / "children").read_text().split()
        except OSError:
            continue
        for kid in kids:
            stat = _stat(int(kid))
            if stat:
                out[int(kid)] = stat.pgid
    return out


def _traced_by(members: dict[int, int]) -> list[int]:
    """Processes outside ``members`` that a thread of one of ``members`` has ptrace-attached (py-spy)."""
    tids: set[int] = set()
    for pid in members:
        try:
            tids.update(int(t) for t in os.listdir(PROC / str(pid) / "task"))
        except OSError:
            continue
    return [int(name) for name in os.listdir(PROC)
            if name.isdigit() and int(name) not in members and tracer_tid(int(name), PROC) in tids]


def _stat(pid: int) -> Stat | None:
    return read_stat(PROC / str(pid))


def _wait_exited(pids: list[int]) -> None:
    """Until the killed tracers are dead (zombie or gone): the kernel detaches ptrace in their exit."""
    deadline = time.monotonic() + WAIT_S
    for pid in pids:
        while time.monotonic() < deadline:
            stat = _stat(pid)
            if stat is None or stat.state in ("Z", "X"):
                break
            time.sleep(0.005)
