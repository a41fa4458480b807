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
import time
from pathlib import Path

from vllmdiag.probes._procfs import read_stat, read_text

PROC = Path("/proc")  # the machine's, for killtree (our own children); a probe passes ctx.proc_root. No default:
# every caller says which /proc it means, so none reads the machine's by forgetting to pass its own.
SETTLE_S = 1.0  # a loaded node may take this long to schedule a woken task


def tracer_tid(pid: int, proc_root: Path) -> int:
    """The thread id that ptrace-attached ``pid`` (its ``TracerPid``), 0 when none or unreadable."""
    # status is world-readable: a miss is a pid that is gone, traced by nobody.
    for line in (read_text(proc_root / str(pid) / "status") or "").splitlines():
        if line.startswith("TracerPid:"):
            try:
                return int(line.split()[1])
            except (ValueError, IndexError):
                return 0
    return 0


def traced_by(pid: int, tracer_pid: int, proc_root: Path) -> bool:
    """True when a thread of process ``tracer_pid`` (or of its process group) is tracing ``pid``."""
    tid = tracer_tid(pid, proc_root)
    if tid == 0:
        return False
    if tid == tracer_pid:
        return True
    try:
        status = (proc_root / str(tid) / "status").read_bytes()
    except OSError:
        return False
    stat = read_stat(proc_root / str(tid))
    if stat is None:
        return False
    tgid = next((int(line.split()[1]) for line in status.splitlines() if line.startswith(b"Tgid:")), 0)
    return tracer_pid in (tgid, stat.pgid)


def state(pid: int, proc_root: Path) -> str | None:
    stat = read_stat(proc_root / str(pid))
    return stat.state if stat else None


def resume_stopped(pids: list[int], proc_root: Path, wait_s: float = SETTLE_S) -> list[int]:
    """SIGCONT each of ``pids`` that is stopped (T) once its dead tracer's detach has played out; the
    ones resumed. Only for targets our own tracer stopped (see the module doc).

    The kernel wakes a traced task at the detach and it re-enters its group stop only when next
    scheduled, which on a loaded node takes a while (it reads t or R until then): wait for that, for
    all of them together, at most ``wait_s``. One that has not settled by then, its tracer gone, is
    resumed all the same: it was ours, and a woken task still on its way into the stop would otherwise
    stay stopped (SIGCONT to a task already running changes nothing)."""
    deadline = time.monotonic() + wait_s
    todo, done = list(pids), []
    while todo:
        settled = [p for p in todo if state(p, proc_root) not in ("t", "R") and tracer_tid(p, proc_root) == 0]
        for pid in settled:
            todo.remove(pid)
            if state(pid, proc_root) == "T" and _cont(pid):
                done.append(pid)
        if not todo:
            return done
        if time.monotonic() >= deadline:
            return done + [p for p in todo if state(p, proc_root) in ("t", "R", "T") and tracer_tid(p, proc_root) == 0
                           and _cont(p)]
        time.sleep(0.005)
    return done


def _cont(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGCONT)
        return True
    except OSError:
        return False
