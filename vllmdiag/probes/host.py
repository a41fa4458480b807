"""Node facts: hostname, kernel, container hints, /dev/shm capacity, limits, our privileges."""

from __future__ import annotations

import os
import socket
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import ProbeSpec
from vllmdiag.probes._procfs import read_text  # the system's files and our own: a miss is "not on this kernel"
from vllmdiag.probes._procfs import readlink as _readlink

SPEC = ProbeSpec(name="host", layer="host", description="hostname, kernel, container hints, /dev/shm, limits",
                 timeout_s=2.0, deferred=True)


def collect(ctx: Context) -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "kernel": os.uname().release,  # what platform.release() reads, without its 2 ms import
        "machine": os.uname().machine,
        "cpu_count": os.cpu_count(),
        "mem_total_bytes": _meminfo(ctx, "MemTotal"),
        "mem_available_bytes": _meminfo(ctx, "MemAvailable"),
        "dev_shm": shm_usage(str(ctx.dev_shm)),
        "container": _container_hints(ctx),
        "euid": os.geteuid(),
        "ptrace_scope": _int_or_none(read_text(ctx.proc("sys/kernel/yama/ptrace_scope"))),
        "cap_sys_ptrace": _has_cap(read_text(ctx.proc("self/status")), 19),
        "pid_max": _int_or_none(read_text(ctx.proc("sys/kernel/pid_max"))),
        "threads_max": _int_or_none(read_text(ctx.proc("sys/kernel/threads-max"))),
        "rpc_base": str(ctx.rpc_base),
    }


def shm_usage(path: str) -> dict[str, Any]:
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return {"path": path, "error": str(exc)}
    return {
        "path": path,
        "size_bytes": st.f_blocks * st.f_frsize,
        "free_bytes": st.f_bavail * st.f_frsize,
        "used_bytes": (st.f_blocks - st.f_bfree) * st.f_frsize,
    }


def _meminfo(ctx: Context, key: str) -> int | None:
    for line in (read_text(ctx.proc("meminfo")) or "").splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    return None


def _container_hints(ctx: Context) -> dict[str, Any]:
    cgroup = read_text(ctx.proc("self/cgroup")) or ""
    return {
        "dockerenv": os.path.exists("/.dockerenv"),
        "kubernetes": "KUBERNETES_SERVICE_HOST" in os.environ,
        "cgroup": cgroup.strip().splitlines()[:3],
        "pid1_comm": (read_text(ctx.proc("1/comm")) or "").strip(),
        "pid_ns": _readlink(ctx.proc("self/ns/pid")),
    }




def _int_or_none(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def _has_cap(status: str | None, bit: int) -> bool | None:
    for line in (status or "").splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> bit & 1)
    return None
