"""Raw facts for reading NVML's pids from inside a container (the ``nvml`` probe's helper).

The NVIDIA driver is not PID-namespace aware: NVML always names a GPU's processes by their pids in
the host's (initial) namespace, even when asked from inside a container (NVIDIA/nvidia-docker#1483,
NVIDIA/gpu-monitoring-tools#63). Run inside a pod, those numbers mean nothing in our ``/proc``, and
one may even be the pid of an unrelated local process. What a pod can see honestly is which of its
processes hold a GPU's device node (``/dev/nvidia<minor>``) open. This module records that and which
PID namespace numbers our ``/proc``; ``vllmdiag/analysis/views/nvml_pids.py`` decides what maps to what.
"""

from __future__ import annotations

import os
import re
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probes._procfs import list_pids, read_text, readlink_checked  # read_text: our own status only

# The initial PID namespace has a fixed inode (PROC_PID_INIT_INO, include/linux/proc_ns.h); the
# analysis keeps the same constant (it may not import probes). Anything else is a container's.
INIT_PID_NS = "pid:[4026531836]"
_NVIDIA_DEV = re.compile(r"^/dev/nvidia(\d+)$")
MAX_PIDS = 4096  # a pod has a few dozen processes; a namespace with more is not scanned past this
MAX_FDS = 8192  # per process: a vLLM worker holds hundreds; stop before a pathological one


def pid_namespace(ctx: Context) -> dict[str, Any]:
    """Our pid namespace, the one our /proc numbers (its pid 1's) and our NSpid chain there."""
    status = read_text(ctx.proc("self", "status")) or ""
    nspid = next(([int(v) for v in line.split()[1:9] if v.isdigit()] for line in status.splitlines()
                  if line.startswith("NSpid:")), None)
    return {"self": readlink_checked(ctx.proc("self", "ns", "pid"))[0],
            "proc_1": readlink_checked(ctx.proc(1, "ns", "pid"))[0], "self_nspid": nspid}


def not_the_hosts(ns: dict[str, Any]) -> bool:
    """Whether our /proc may number another namespace than the host's (then the holders are worth
    reading). Unknown counts as maybe: the scan costs ~15 ms per 170 processes."""
    nspid = ns.get("self_nspid") or []
    procfs = ns.get("proc_1") or (ns.get("self") if len(nspid) == 1 else None)
    return procfs != INIT_PID_NS


def device_fds(ctx: Context) -> dict[str, Any]:
    """{"holders": {pid: [minor, ...]}, "unreadable_pids": [...], "scanned": n, "truncated": bool}.
    Keys are strings (JSON); a process holding no GPU device is left out."""
    holders: dict[str, list[int]] = {}
    unreadable: list[int] = []
    pids = list_pids(ctx.proc_root)
    for pid in pids[:MAX_PIDS]:
        if ctx.cancelled:
            break
        minors, denied = _minors(ctx, pid)
        if denied:
            unreadable.append(pid)
        if minors:
            holders[str(pid)] = minors
    return {"holders": holders, "unreadable_pids": unreadable, "scanned": min(len(pids), MAX_PIDS),
            "truncated": len(pids) > MAX_PIDS}


def _minors(ctx: Context, pid: int) -> tuple[list[int], bool]:
    fd_dir = ctx.proc(pid, "fd")
    try:
        fds = os.listdir(fd_dir)
    except PermissionError:
        return [], True
    except OSError:
        return [], False  # gone: a normal /proc race
    found: set[int] = set()
    for fd in fds[:MAX_FDS]:
        target, denied = readlink_checked(fd_dir / fd)
        if denied:
            return sorted(found), True
        m = _NVIDIA_DEV.match(target or "")
        if m:
            found.add(int(m.group(1)))
    return sorted(found), False
