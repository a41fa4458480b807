"""The gate's own facts probe (`preflight`): what a node offers a deployment that is not running yet.

Limits this process would hand down (RLIMIT_NOFILE/NPROC, cgroup pids.max), py-spy, listening TCP
ports, the VLLM_/NCCL_ environment, and VLLM_RPC_BASE_PATH with its stale socket files. Read-only:
stat, /proc, /sys and `py-spy --version`; nothing is bound, written or unlinked.
"""

from __future__ import annotations

import os
import resource
import stat
import sys
from pathlib import Path
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import ProbeSpec
from vllmdiag.probes._procfs import list_pids, parse_environ, read_text, readlink  # see _owners: a miss is nothing

SPEC = ProbeSpec(name="preflight", layer="host", description="limits, py-spy, listening ports, env, rpc base dir",
                 default=False,  # gate-only: enabled by options.preflight (vllmdiag gate, sweep --gate)
                 timeout_s=4.0)
ENV_KEEP = ("VLLM_", "NCCL_", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "TORCH_NCCL")
MAX_SOCKET_FILES = 4096


def collect(ctx: Context) -> dict[str, Any]:
    ports = set(ctx.options.gate_ports)
    listening = listening_tcp(ctx)
    _owners(ctx, [s for s in listening if s["port"] in ports])
    environ = "\0".join(f"{k}={v}" for k, v in os.environ.items())
    return {
        "rlimits": {"nofile": _rlimit(resource.RLIMIT_NOFILE), "nproc": _rlimit(resource.RLIMIT_NPROC)},
        "cgroup_pids": cgroup_pids(ctx),
        "pyspy": _pyspy(ctx),
        "listening": listening,
        "env": parse_environ(environ, ENV_KEEP),
        "rpc_base": rpc_base(ctx),
    }


def parse_listeners(text: str, family: int) -> list[dict[str, Any]]:
    """LISTEN rows (state 0A) of /proc/net/tcp or tcp6: port, local address (hex), socket inode."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or parts[3] != "0A":
            continue
        host, port = parts[1].rsplit(":", 1)
        out.append({"local": host, "port": int(port, 16), "family": family, "inode": int(parts[9]), "pids": []})
    return out


def listening_tcp(ctx: Context) -> list[dict[str, Any]]:
    return [row for name, fam in (("net/tcp", 4), ("net/tcp6", 6))
            for row in parse_listeners(read_text(ctx.proc(name)) or "", fam)]


def _owners(ctx: Context, rows: list[dict[str, Any]]) -> None:
    """Fill pids/comm of the listeners we care about (only those: scanning every fd costs). The gate says
    "busy" from the table; a holder we may not see is only left unnamed, so its misses are nothing."""
    wanted = {f"socket:[{r['inode']}]": r for r in rows}
    if not wanted:
        return
    for pid in list_pids(ctx.proc_root):
        try:
            fds = os.listdir(ctx.proc(pid, "fd"))
        except OSError:
            continue
        for fd in fds:
            row = wanted.get(readlink(ctx.proc(pid, "fd", fd)) or "")
            if row is not None and pid not in row["pids"]:
                row["pids"].append(pid)
                row["comm"] = (read_text(ctx.proc(pid, "comm")) or "").strip()


def cgroup_pids(ctx: Context) -> dict[str, Any] | None:
    """Tightest pids.max of our cgroup and its ancestors (v2 unified, or the v1 pids controller)."""
    sys_root = Path(ctx.options.sys_root)
    base, rel = None, None
    for line in (read_text(ctx.proc("self/cgroup")) or "").splitlines():
        hid, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hid == "0" and controllers == "" and base is None:
            base, rel = sys_root / "fs/cgroup", path
        if "pids" in controllers.split(","):
            base, rel = sys_root / "fs/cgroup/pids", path
    if base is None or rel is None:
        return None
    best: dict[str, Any] | None = None
    room = 1 << 62
    parts = [p for p in rel.split("/") if p]
    for depth in range(len(parts), -1, -1):
        d = base.joinpath(*parts[:depth])
        limit = (read_text(d / "pids.max") or "").strip()
        if not limit or limit == "max":
            continue
        current = int((read_text(d / "pids.current") or "0").strip() or 0)
        if int(limit) - current < room:
            room, best = int(limit) - current, {"path": str(d), "max": int(limit), "current": current}
    return best or {"path": str(base / rel.lstrip("/")), "max": None, "current": None}


def _pyspy(ctx: Context) -> dict[str, Any]:
    # The stacks probe's own locator: the gate must judge the py-spy triage will run (next to our
    # Python first, then PATH), or it says "not on PATH" while triage reads stacks (issue 16).
    from vllmdiag.probes.stacks import find_py_spy

    path = find_py_spy()
    if path is None:
        return {"path": None, "version": None, "error": f"not on PATH nor next to {sys.executable}"}
    res = ctx.run([path, "--version"], timeout_s=2.0)
    ok = res.returncode == 0 and not res.timed_out
    return {"path": path, "version": res.stdout.strip().removeprefix("py-spy ") if ok else None,
            "error": None if ok else (res.error or res.stderr.strip()[:200] or "timed out")}


def rpc_base(ctx: Context) -> dict[str, Any]:
    path = Path(ctx.rpc_base)
    out: dict[str, Any] = {"path": str(path), "exists": False, "is_dir": False, "stale_sockets": [], "socket_files": 0}
    try:
        st = path.stat()
        vfs = os.statvfs(path)
    except OSError as exc:
        out["error"] = exc.strerror or str(exc)
        return out
    out.update(exists=True, is_dir=stat.S_ISDIR(st.st_mode), mode=stat.S_IMODE(st.st_mode), uid=st.st_uid,
               gid=st.st_gid, readonly=bool(vfs.f_flag & os.ST_RDONLY))
    if not out["is_dir"]:
        return out
    live = {line.split(None, 7)[7].strip() for line in (read_text(ctx.proc("net/unix"), 64 << 20) or "").splitlines()[1:]
            if len(line.split(None, 7)) == 8}
    try:
        entries = list(os.scandir(path))[:MAX_SOCKET_FILES]
    except OSError:
        entries = []
    for entry in entries:
        try:
            is_sock = stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode)
        except OSError:
            continue
        if is_sock:
            out["socket_files"] += 1
            if entry.path not in live:
                out["stale_sockets"].append(entry.path)
    return out


def _rlimit(which: int) -> list[int | None]:
    soft, hard = resource.getrlimit(which)
    return [None if v == resource.RLIM_INFINITY else v for v in (soft, hard)]
