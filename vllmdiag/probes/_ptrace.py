"""Who is tracing a process, and the one signal we ever send: SIGCONT to undo a stop our py-spy caused.

py-spy ptrace-attaches to read a stack; the attach stops the target, and a py-spy killed before it
detaches leaves the target stopped (the kernel's detach at the tracer's death does not resume a
group stop). DESIGN principle 1 allows exactly one repair: resume a target *our* py-spy stopped. An
operator's or Slurm's SIGSTOP must stand (issue 15 item 6). So a target is resumed only if, at the
moment we killed py-spy, its ``TracerPid`` was a thread of that py-spy, it was running before, and
it is stopped after.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

PROC = Path("/proc")


def tracer_tid(pid: int, proc_root: Path = PROC) -> int:
    """The thread id that ptrace-attached ``pid`` (its ``TracerPid``), 0 when none or unreadable."""
    try:
        with open(proc_root / str(pid) / "status", "rb") as fh:
            for line in fh:
                if line.startswith(b"TracerPid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def traced_by(pid: int, tracer_pid: int, proc_root: Path = PROC) -> bool:
    """True when a thread of process ``tracer_pid`` (or of its process group) is tracing ``pid``."""
    tid = tracer_tid(pid, proc_root)
    if tid == 0:
        return False
    if tid == tracer_pid:
        return True
    try:
        status = (proc_root / str(tid) / "status").read_bytes()
        stat = (proc_root / str(tid) / "stat").read_bytes()
    except OSError:
        return False
    tgid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith(b"Tgid:")), 0)
    rest = stat[stat.rfind(b")") + 2:].split()
    pgid = int(rest[2]) if len(rest) > 2 else 0
    return tracer_pid in (tgid, pgid)


def state(pid: int, proc_root: Path = PROC) -> str | None:
    try:
        stat = (proc_root / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    rest = stat[stat.rfind(b")") + 2:].split()
    return rest[0].decode() if rest else None


def resume_if_stopped(pid: int, proc_root: Path = PROC) -> bool:
    """SIGCONT ``pid`` if it is in a stop (state T). Call only for a target our own tracer stopped."""
    if state(pid, proc_root) != "T":
        return False
    try:
        os.kill(pid, signal.SIGCONT)
        return True
    except OSError:
        return False
