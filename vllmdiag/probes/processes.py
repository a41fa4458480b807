"""Every vLLM process and its tree: titles, roles, ranks, state, threads, resources.

Seeds are processes with a vLLM title (or Ray's title for a vLLM worker actor, ``ray::RayWorkerProc``)
plus the API server; all their descendants come along (zombies lose their cmdline). The parent of
a seed that is not itself selected comes along too, marked ``selected_as: "parent"``: it is what
tells an offline ``LLM()`` script (EngineCore or in-process workers under a user's Python) from an
engine orphaned by a dead API server (under init, a subreaper or a shell), and the ``raylet`` above
Ray workers. The probe only records it; analysis decides what it is.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import Partial, ProbeSpec
from vllmdiag.probes import _inproc
from vllmdiag.probes._access import blind_reason
from vllmdiag.probes._procfs import (
    DENIED,
    ProcMiss,
    Stat,
    boot_time,
    list_pids,
    parse_environ,
    read_cmdline,
    read_proc,
    read_stat,
    read_stat_checked,
    read_text,
    redact_argv,
)
from vllmdiag.probes._procfs import readlink as _readlink
from vllmdiag.vocab.titles import parse_cmdline

SPEC = ProbeSpec(
    name="processes",
    layer="process",
    description="vLLM processes (titles, roles, ranks, state, tree, threads, fds, limits)",
    timeout_s=5.0,  # a hung node is often a loaded one: /proc reads slow down with the load
)

ENV_KEEP = ("VLLM_", "NCCL_", "CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "TORCH_NCCL", "TORCH_DISTRIBUTED",
            "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "HF_TOKEN", "TMPDIR",
            "RAY_JOB_ID",  # a Ray actor's job (set by its raylet): ties a driver's workers across nodes
            "LMCACHE_", "MOONCAKE_")  # P/D KV connectors' settings (VLLM_NIXL_* is under VLLM_); redacted as all
CHEAP_ENV_ROLES = ("api_server", "engine_core", "dp_coordinator")  # deployment roots: `watch --select` reads them
IO_ROLES = ("engine_core", "worker", "worker_starting")  # who loads, compiles and captures at start-up
SEED_ROLES = {"api_server", "engine_core", "worker", "dp_coordinator", "api_server_child", "vllm_other"}
PARENT_OF = {"engine_core", "worker", "dp_coordinator", "vllm_other"}  # seeds whose parent we describe


def collect(ctx: Context) -> dict[str, Any] | Partial:
    ticks = os.sysconf("SC_CLK_TCK")
    page = os.sysconf("SC_PAGE_SIZE")
    btime = boot_time(ctx.proc_root)
    table: dict[int, dict[str, Any]] = {}
    hidden: list[int] = []  # listed but not ours to read (/proc mounted hidepid=1): a vLLM may hide there
    for pid in list_pids(ctx.proc_root):
        base = ctx.proc(pid)
        stat = read_stat_checked(base)
        if stat is DENIED:
            hidden.append(pid)
        if not isinstance(stat, Stat):
            continue  # vanished, or denied (listed above)
        argv = read_cmdline(base) or []
        table[pid] = {"pid": pid, "argv": argv, "stat": stat}  # comm: read for the chosen few only
    chosen = _select(table, ctx.title_prefix)
    parents = _parents(table, chosen)
    now = _uptime(ctx.proc_root)
    procs = [_describe(ctx, table[pid], ticks, page, btime, now) for pid in sorted(chosen | parents)]
    scan: dict[str, Any] = {}
    procs += _inprocess(ctx, table, chosen | parents, (ticks, page, btime, now), scan)
    above: list[dict[str, Any]] = []
    for p in procs:
        if p is not None and p["pid"] in parents:
            p["selected_as"] = "parent"
            if p["role"] is None and _python(p):
                p["role"] = "llm_client"  # a Python that started vLLM processes: their client (LLM())
            else:
                above.append(p)  # init, a shell, a subreaper, raylet: context, not a vLLM process
    described = [p for p in procs if p is not None and not any(p is a for a in above)]
    data = {
        "title_prefix": ctx.title_prefix,
        "pid_count": len(table),
        "self_pid": os.getpid(),
        "processes": described,
        "parents": above,
        "inprocess_scan": scan,
        "unreadable_pids": hidden,
    }
    denied = _denied_reads(described)
    why = ([blind_reason("/proc/<pid>/stat", hidden)] if hidden else []) + [
        blind_reason(f"/proc/<pid>/{what}", pids) for what, pids in denied.items()]
    return Partial(data, "; ".join(why)) if why else data


# Per-process reads whose denial changes a verdict, and the marker that says so ("<key>_unreadable": "denied"):
# environ (the settings analysis reads: in-process engine, ready timeout), fd (the fd-exhaustion check),
# status (uid, namespace pids), limits (RLIMIT_NOFILE, RLIMIT_NPROC).
MARKED = {"environ": "environ", "fds": "fd", "status": "status", "limits": "limits"}


PF_EXITING = 0x4  # include/linux/sched.h


def _denied_reads(procs: list[dict[str, Any]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for key, what in MARKED.items():
        pids = [p["pid"] for p in procs if p.get(f"{key}_unreadable") == "denied"]
        if pids:
            out[what] = pids
    return out


def _select(table: dict[int, dict[str, Any]], prefix: str) -> set[int]:
    """vLLM seeds plus all their descendants (zombies have no cmdline; only the tree finds them)."""
    children: dict[int, list[int]] = {}
    for pid, row in table.items():
        children.setdefault(row["stat"].ppid, []).append(pid)
    seeds = set()
    for pid, row in table.items():
        info = parse_cmdline(row["argv"], prefix)
        row["info"] = info
        if info.role in SEED_ROLES:
            seeds.add(pid)
    chosen = set(seeds)
    todo = list(seeds)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in chosen:
                chosen.add(child)
                todo.append(child)
    return chosen


def _inprocess(ctx: Context, table: dict[int, dict[str, Any]], taken: set[int], clock: tuple[int, int, float, float],
               scan: dict[str, Any]) -> list[dict[str, Any]]:
    """Untitled Python processes that map vLLM's compiled kernels (an in-process engine, or any
    script that imported them): described with the evidence, ``role`` None, for analysis to judge.
    ``scan`` records what could not be looked at (maps denied or cut short), so "no vLLM here" can say so."""
    out = []
    pids = _inproc.candidates(table, taken | {os.getpid()})
    scan.update(candidates=len(pids), unreadable_pids=[], truncated_pids=[], unchecked_pids=[])
    for pid, (found, how) in sorted(_inproc.scan(pids, ctx.proc).items()):
        if how in ("denied", "truncated", "unchecked"):
            scan[{"denied": "unreadable_pids", "truncated": "truncated_pids"}.get(how, "unchecked_pids")].append(pid)
        if found is not None:
            desc = _describe(ctx, table[pid], *clock)
            if desc is not None and not desc["environ"] and "environ_unreadable" not in desc:  # cheap pass skipped it
                environ = read_proc(ctx.proc(pid) / "environ")
                desc["environ"] = parse_environ(environ, ENV_KEEP) if isinstance(environ, str) else {}
                if environ is DENIED:
                    desc["environ_unreadable"] = "denied"
            if desc is not None:
                out.append({**desc, **found})
    return out


def _python(proc: dict[str, Any]) -> bool:
    head = str((proc.get("cmdline") or [""])[0]).rsplit("/", 1)[-1]
    return head.startswith("python") or str(proc.get("comm") or "").startswith("python")


def _parents(table: dict[int, dict[str, Any]], chosen: set[int]) -> set[int]:
    """Parents of engine/worker seeds that are outside the selection (pid 0 is the kernel)."""
    out = set()
    for pid in chosen:
        row = table[pid]
        ppid = row["stat"].ppid
        if row["info"].role in PARENT_OF and ppid not in chosen and ppid in table:
            out.add(ppid)
    return out


def _describe(ctx: Context, row: dict[str, Any], ticks: int, page: int, btime: float, uptime: float
              ) -> dict[str, Any] | None:
    pid = row["pid"]
    base = ctx.proc(pid)
    stat: Stat = row["stat"]
    info = row["info"]
    threads, status, environ, limits, fds, denied = _reads(ctx, base, info.role)
    argv = redact_argv(row["argv"])
    return {
        "pid": pid,
        "ppid": stat.ppid,
        "pgid": stat.pgid,
        "title": " ".join(argv)[:512],
        "cmdline": argv[:64],
        # comm and wchan only name things: comm is world-readable (what hides it hides stat too, above), and
        # the kernel writes "0" into a wchan we may not see rather than refusing the read.
        "comm": (read_text(base / "comm") or "").strip(),
        "role": info.role,
        "name": info.name,
        "ranks": info.ranks,
        "titled": info.titled,
        "executor": info.executor,
        "state": stat.state,
        # PF_EXITING: the kernel is tearing the process down (SIGKILLed or crashed). A big one (GBs
        # mapped) takes a while, state still R or D, its cmdline already gone (seen: a killed TP1 worker
        # read as an untitled "VLLM::Worker_TP" for ~0.3 s, taken for a worker still starting).
        "exiting": bool(stat.flags & PF_EXITING),
        "wchan": (read_text(base / "wchan") or "").strip() or None,
        "threads": threads,
        "num_threads": stat.num_threads,
        "zmq_contexts": sum(1 for t in threads if t["name"] == "ZMQbg/Reaper"),
        **_clock(stat, ticks, page, btime, uptime),
        "num_fds": fds if isinstance(fds, int) else None,
        "rlimit_nofile": _limit(limits, "Max open files"),
        "rlimit_nproc": _limit(limits, "Max processes"),
        "uid": _uid(status),
        # Pids of this process in each pid namespace, outermost first (a container's pid last):
        # NVML and a containerised vLLM name the same process differently.
        "nspid": _nspid(status),
        "environ": parse_environ(environ, ENV_KEEP) if isinstance(environ, str) and environ else {},
        "ns": {n: _readlink(base / "ns" / n) for n in ("pid", "mnt", "net")},
        # Bytes read and written so far: a start-up loading weights (files, a socket) reads while its stack and
        # CPU time may look still (a long read in D, a download); analysis compares it across passes.
        **({"io": _inproc.io_counters(read_text(base / "io"))} if info.role in IO_ROLES else {}),
        **denied,
    }


Reads = tuple[list[dict[str, Any]], str | None, str | ProcMiss | None, str | None, int | ProcMiss | None, dict[str, str]]


def _reads(ctx: Context, base: Path, role: str | None) -> Reads:
    """(threads, status, environ, limits, fds, denied markers) of one process: what a pass may skip."""
    # options.cheap: the watcher's pass every few seconds needs states, CPU times and the tree;
    # per-thread, fd, limit and environment reads (all but a deployment root's) are for triage.
    cheap = ctx.options.cheap
    threads = [] if cheap else _threads(base / "task")
    status = None if cheap else read_proc(base / "status")
    environ = read_proc(base / "environ") if not cheap or role in CHEAP_ENV_ROLES else None
    limits = None if cheap else read_proc(base / "limits")
    fds = None if cheap else _count(base / "fd")
    # A denied read is a blind spot, not an empty answer: each says which (gone and zombie need no word).
    denied = {f"{key}_unreadable": "denied" for key, got in
              (("environ", environ), ("fds", fds), ("status", status), ("limits", limits)) if got is DENIED}
    status_text, limits_text = (t if isinstance(t, str) else None for t in (status, limits))
    return threads, status_text, environ, limits_text, fds, denied


def _clock(stat: Stat, ticks: int, page: int, btime: float, uptime: float) -> dict[str, Any]:
    """CPU times, resident size, start and age of one process, from its stat (ticks and pages)."""
    start_s = stat.starttime_ticks / ticks
    return {
        "cpu_user_s": round(stat.utime_ticks / ticks, 2),
        "cpu_system_s": round(stat.stime_ticks / ticks, 2),
        "rss_bytes": stat.rss_pages * page,
        "start_time": round(btime + start_s, 2),
        "age_s": round(max(0.0, uptime - start_s), 2),
    }


def _threads(task_dir: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    try:
        tids = sorted(int(t) for t in os.listdir(task_dir) if t.isdigit())
    except OSError:
        return out
    for tid in tids[:256]:  # task/ is world-readable: a miss here is a thread that just ended
        name = read_text(task_dir / str(tid) / "comm")
        stat = read_stat(task_dir / str(tid))
        if name is None:
            continue
        out.append({"tid": tid, "name": name.strip(), "state": stat.state if stat else None})
    return out


def _nspid(status: str | None) -> list[int] | None:
    for line in (status or "").splitlines():
        if line.startswith("NSpid:"):
            vals = line.split()[1:]
            return [int(v) for v in vals[:8] if v.isdigit()] or None
    return None


def _count(path: Path) -> int | ProcMiss | None:
    """How many fds; DENIED when not ours to list (another user's process), None when it is gone."""
    try:
        return len(os.listdir(path))
    except PermissionError:
        return DENIED
    except OSError:
        return None


def _limit(text: str | None, label: str) -> list[int | None] | None:
    for line in (text or "").splitlines():
        if line.startswith(label):
            parts = line[len(label):].split()
            return [None if v == "unlimited" else int(v) for v in parts[:2]]
    return None


def _uid(status: str | None) -> int | None:
    for line in (status or "").splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None



# /proc/uptime is the system's, readable by anyone: a miss means no /proc at all.
def _uptime(proc_root: Path) -> float:
    text = read_text(proc_root / "uptime") or "0"
    return float(text.split()[0])
