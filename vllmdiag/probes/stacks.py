"""py-spy stacks of every vLLM process, dumped in parallel, each under its own deadline.

A hung deployment is exactly where py-spy can hang: ptrace-stopping a process in uninterruptible
sleep (D) never completes. So a target already stopped (T) or in D is read with ``--nonblocking``
(no ptrace stop; a stopped process cannot change under us) and a short deadline, and any py-spy
still running at its deadline is killed with its process group by ``ctx.run``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import Partial, ProbeSpec, Skip
from vllmdiag.probes._procfs import read_stat, read_text  # sysctl, our status, a stat anyone may read: a miss is nothing
from vllmdiag.probes._ptrace import resume_stopped, traced_by
from vllmdiag.probes._pyspy_text import parse_tree_dump

SPEC = ProbeSpec(name="stacks", layer="gpu", description="py-spy stacks of every vLLM process (parallel, bounded)",
                 requires=("processes",), timeout_s=6.0)

DUMP_TIMEOUT_S = 3.0
STOPPED_TIMEOUT_S = 1.0  # T/D targets: a non-blocking read either answers at once or not at all
# Every py-spy ends this long before the probe's deadline, so the probe returns what it read (and one
# entry per target it could not read) before the runner's watchdog records it as a timeout with
# nothing: a tight confirm pass on a loaded node used to lose every dump, the finished ones too.
RESERVE_S = 0.2
MIN_DUMP_S = 0.05
MAX_FRAMES = 96
MAX_PARALLEL = 16  # py-spy processes at once however many cores (each ptrace-stops its target)
PARALLEL_MIN_CORES = 4  # below this, one tree dump (see collect)
DUMP_ROLES = ("api_server", "api_server_child", "engine_core", "worker", "dp_coordinator", "spawn_child", "llm_client")
PTRACE_FIX = "run as root, add CAP_SYS_PTRACE, or kubectl debug --profile=general"
CAP_SYS_PTRACE = 19


def collect(ctx: Context) -> dict[str, Any] | Partial:
    native, nonblocking = ctx.options.native, ctx.options.nonblocking
    if native and nonblocking:
        raise Skip("--native and --nonblocking cannot be combined (native unwinding needs the target stopped)")
    exe = find_py_spy()
    if exe is None:
        raise Skip(f"py-spy not found on PATH or next to {sys.executable}; pip install py-spy")
    targets = select_targets(ctx.data("processes"), ctx.options.pids)
    only = ctx.options.stack_pids  # the orchestrator's second look at a few processes
    if only:
        targets = [p for p in targets if p["pid"] in set(only)]
    blocked = {p["pid"]: why for p in targets if (why := ptrace_block(ctx, p)) is not None}
    if targets and len(blocked) == len(targets):
        raise Skip(next(iter(blocked.values())))
    mode = "native" if native else "nonblocking" if nonblocking else "blocking"
    end = min(ctx.deadline, time.monotonic() + SPEC.timeout_s * ctx.stretch) - RESERVE_S  # the watchdog's limit, less the reserve
    # One py-spy per process, one per core at once: a slow or stuck target holds only its own slot.
    cores = os.cpu_count() or 1
    workers = max(1, min(len(targets), cores, MAX_PARALLEL))
    start = time.monotonic()
    todo = [p for p in targets if p["pid"] not in blocked]
    # Few cores: one `dump --subprocesses` per tree instead. Measured on 2 cores, healthy simulated TP=8
    # (10 processes, py-spy 0.4): one dump after another 0.12-0.16 s wall / 0.14 s CPU, two at a time
    # 0.06 s / 0.14 s, the tree 0.10 s / 0.10 s. Inside a triage the two cores are busy with the other
    # probes, so the tree's lower CPU wins there (same wall, ~40 ms less CPU). It walks the processes
    # one at a time, though: with cores to spare, single dumps side by side finish far sooner.
    tree = mode != "native" and not only and cores < PARALLEL_MIN_CORES
    dumps = dump_trees(ctx, exe, todo, mode, end) if tree else []
    done = {d["pid"] for d in dumps}
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="py-spy") as pool:
        dumps += list(pool.map(lambda p: dump_one(ctx, exe, p["pid"], mode, end), [p for p in todo if p["pid"] not in done]))
    dumps += [{"pid": pid, "status": "skipped", "reason": why, "duration_s": 0.0} for pid, why in blocked.items()]
    data = {"py_spy": exe, "mode": mode, "concurrency": workers, "wall_s": round(time.monotonic() - start, 4),
            "dumps": sorted(dumps, key=lambda d: d["pid"])}
    failed = [d for d in dumps if d["status"] != "ok"]
    if failed:
        return Partial(data, f"{len(failed)} of {len(dumps)} dumps not ok: "
                       + "; ".join(f"pid {d['pid']} {d['status']} ({d.get('reason')})" for d in failed[:3]))
    return data


def dump_trees(ctx: Context, exe: str, targets: list[dict[str, Any]], mode: str, end: float | None = None
               ) -> list[dict[str, Any]]:
    """Few cores: one ``py-spy dump --subprocesses`` per process tree instead of one py-spy per
    process (less CPU: one process start, see collect). Only when every target is running or
    sleeping: py-spy walks the tree one process at a time, so a stopped or D-state member would
    stall the rest; those, and anything the tree dump missed or
    timed out on, go to the per-process path (which has the per-target deadlines)."""
    states = {p["pid"]: proc_state(ctx, p["pid"]) for p in targets}
    if not targets or any(st not in ("R", "S", "I") for st in states.values()):
        return []
    pids = set(states)
    by_pid = {p["pid"]: p for p in targets}
    # A target that is our own ancestor (an offline LLM() script or a notebook kernel that ran us) is
    # dumped alone: its tree holds this collector and the py-spy, which py-spy cannot read, and at that
    # error it drops the rest of the walk (seen under load: the whole tree dump lost).
    tree_pids = pids - own_ancestors(ctx)
    roots = sorted(pid for pid in tree_pids if by_pid[pid]["ppid"] not in tree_pids)
    out: list[dict[str, Any]] = []
    for root in roots:
        argv = [exe, "dump", "--subprocesses", "--pid", str(root)] + (["--nonblocking"] if mode == "nonblocking" else [])
        ours: set[int] = set()
        timeout = min(DUMP_TIMEOUT_S * ctx.stretch, max(0.2, ctx.remaining() - 1.0), time_left(ctx, end))
        if timeout < MIN_DUMP_S:
            break  # what is left goes to the per-process path, which records each target's timeout
        res = ctx.run(argv, timeout, on_timeout=_tracing(ctx, pids, ours))
        for pid in ours:
            _undo_our_stop(ctx, pid, states[pid])
        if res.timed_out or res.error:  # a non-Python child makes py-spy exit non-zero; keep what it read
            continue
        for pid, threads in parse_tree_dump(res.stdout, MAX_FRAMES).items():
            if pid in pids and threads:
                out.append({"pid": pid, "state_before": states[pid], "state_after": proc_state(ctx, pid), "mode": mode,
                            "via": f"tree:{root}", "duration_s": round(res.duration_s, 4), "status": "ok",
                            "threads": threads})
    return out


def own_ancestors(ctx: Context) -> set[int]:
    """This process and its ancestors, as ctx's /proc numbers them (a bounded walk up the ppids)."""
    stat = read_stat(ctx.proc("self"))
    pid = stat.pid if stat else 0
    out: set[int] = set()
    while pid > 1 and pid not in out and len(out) < 64:
        out.add(pid)
        pid = stat.ppid if stat else 0
        stat = read_stat(ctx.proc(pid)) if pid > 1 else None
    return out


def _tracing(ctx: Context, pids: set[int], ours: set[int]) -> Callable[[subprocess.Popen[bytes]], None]:
    """At py-spy's deadline, before its kill: note which targets it is ptrace-attached to."""
    return lambda spy: ours.update(p for p in pids if traced_by(p, spy.pid, ctx.proc_root))


def _undo_our_stop(ctx: Context, pid: int, before: str | None) -> bool:
    """DESIGN principle 1's one exception: our py-spy, killed between its ptrace stop and the detach,
    left a target that was running stopped. Call only for a target it was tracing at the kill; a
    process stopped before we came (or by someone else) stays stopped (issue 15 item 6)."""
    if before in ("T", "t", None):
        return False
    return bool(resume_stopped([pid], ctx.proc_root))


def time_left(ctx: Context, end: float | None = None) -> float:
    """Seconds a py-spy may still take: until ``end`` (the probe's own limit or the run's budget, less
    RESERVE_S to hand back its results), else until the run's deadline less RESERVE_S."""
    return (ctx.deadline - RESERVE_S if end is None else end) - time.monotonic()


def find_py_spy() -> str | None:
    """The binary next to our interpreter first: a pyenv shim on PATH costs a bash start per dump."""
    local = Path(sys.executable).parent / "py-spy"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which("py-spy")


def select_targets(processes: dict[str, Any], pids: Sequence[int] | None) -> list[dict[str, Any]]:
    # "vllm_mapped": an untitled Python mapping vLLM's kernels (an in-process engine, processes.py)
    procs = [p for p in processes.get("processes", []) if (p.get("role") in DUMP_ROLES or
             p.get("selected_as") == "vllm_mapped") and p.get("pid") != processes.get("self_pid")]
    if not pids:
        return procs
    wanted = same_trees(processes.get("processes", []), set(pids))
    # Ray actors live under the raylet, outside any vLLM tree: which engine they serve is decided
    # in analysis (shared rings). When the asked tree has an engine without worker children (the
    # Ray executor's engine, or TP=1), every Ray-titled worker on the node is dumped too.
    rows = processes.get("processes", [])
    parents = {p.get("ppid") for p in rows if p.get("role") == "worker"}
    if any(p.get("role") == "engine_core" and p["pid"] in wanted and p["pid"] not in parents for p in rows):
        wanted |= {p["pid"] for p in procs if p.get("executor") == "ray"}
    return [p for p in procs if p["pid"] in wanted]


def same_trees(rows: list[dict[str, Any]], pids: set[int]) -> set[int]:
    """The given pids' whole process trees (up to the outermost listed ancestor, then every
    descendant), plus orphans in the same process group (workers of a dead EngineCore keep the pgid
    fork gave them). Plain tree walking: which tree is a deployment is analysis's business."""
    by_pid = {p["pid"]: p for p in rows if isinstance(p, dict) and isinstance(p.get("pid"), int)}

    def top(pid: int) -> int:
        seen = set()
        while by_pid.get(pid, {}).get("ppid") in by_pid and pid not in seen:
            seen.add(pid)
            parent = by_pid[by_pid[pid]["ppid"]]
            # A described parent (a user's Python) holds only what it started in its own process
            # group: a harness starting several engines in their own sessions is not one tree.
            if parent.get("selected_as") == "parent" and parent.get("pgid") != by_pid[pid].get("pgid"):
                break
            pid = parent["pid"]
        return pid

    tops = {pid: top(pid) for pid in by_pid}
    roots = {tops[p] for p in pids if p in tops}
    groups = {by_pid[r].get("pgid") for r in roots} - {None}
    return set(pids) | {p for p, t in tops.items() if t in roots or (t == p and by_pid[p].get("pgid") in groups)}


def ptrace_block(ctx: Context, proc: dict[str, Any]) -> str | None:
    """Why ptrace (py-spy) would be refused on this target, or None. Kernel rules: Yama scope 3
    forbids all; without CAP_SYS_PTRACE scope >= 1 forbids non-descendants and any scope forbids other uids."""
    scope_text = read_text(ctx.proc("sys/kernel/yama/ptrace_scope"))
    scope = int(scope_text) if scope_text and scope_text.strip().isdigit() else 0
    if scope >= 3:
        return "ptrace disabled by kernel.yama.ptrace_scope=3 (needs a reboot to lower); stacks cannot be read"
    if _has_cap_ptrace(read_text(ctx.proc("self", "status"))):
        return None
    if scope >= 1:
        return f"ptrace denied: kernel.yama.ptrace_scope={scope} and no CAP_SYS_PTRACE; {PTRACE_FIX}"
    uid = proc.get("uid")
    if uid is not None and uid != os.geteuid():
        return f"ptrace denied: target runs as uid {uid}, we as uid {os.geteuid()}; {PTRACE_FIX}"
    return None


def _has_cap_ptrace(status: str | None) -> bool:
    for line in (status or "").splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_PTRACE & 1)
    return os.geteuid() == 0


def proc_state(ctx: Context, pid: int) -> str | None:
    stat = read_stat(ctx.proc(pid))
    return stat.state if stat else None


def dump_one(ctx: Context, exe: str, pid: int, mode: str, end: float | None = None) -> dict[str, Any]:
    before = proc_state(ctx, pid)
    out: dict[str, Any] = {"pid": pid, "state_before": before}
    if before is None or before in ("Z", "X"):
        return {**out, "status": "skipped", "reason": "process gone" if before is None else "zombie: nothing to dump",
                "duration_s": 0.0}
    argv, timeout = [exe, "dump", "--json", "--pid", str(pid)], DUMP_TIMEOUT_S * ctx.stretch
    if before in ("T", "t", "D"):
        mode, timeout = "nonblocking", STOPPED_TIMEOUT_S
    timeout = min(timeout, time_left(ctx, end))
    if timeout < MIN_DUMP_S:
        return {**out, "status": "timeout", "duration_s": 0.0,
                "reason": "not dumped: the run's time budget was spent on the other dumps"}
    if mode in ("native", "nonblocking"):
        argv.append(f"--{mode}")
    ours: list[bool] = []
    res = ctx.run(argv, timeout, on_timeout=lambda spy: ours.append(traced_by(pid, spy.pid, ctx.proc_root)))
    out.update(mode=mode, duration_s=round(res.duration_s, 4))
    if any(ours):
        out["sigcont_sent"] = _undo_our_stop(ctx, pid, before)
    after = proc_state(ctx, pid)
    out["state_after"] = after
    if res.error:
        return {**out, "status": "error", "reason": res.error}
    if res.timed_out:
        return {**out, "status": "timeout", "reason": f"py-spy gave no answer within {timeout:.1f} s (state {before})"}
    try:
        threads = parse_dump(res.stdout)
    except ValueError as exc:
        reason = (res.stderr.strip().splitlines() or [str(exc)])[-1][:300]
        if "ermission" in reason:
            reason += f"; {PTRACE_FIX}"
        return {**out, "status": "error", "reason": reason}
    return {**out, "status": "ok", "threads": threads}


def parse_dump(text: str) -> list[dict[str, Any]]:
    """py-spy ``dump --json`` output -> compact threads (frames innermost first as [name, file, line])."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"py-spy output is not JSON: {exc.msg}") from None
    if not isinstance(raw, list):
        raise ValueError("py-spy output is not a list of threads")
    return [{"name": t.get("thread_name"), "os_thread_id": t.get("os_thread_id"), "active": t.get("active"),
             "owns_gil": t.get("owns_gil"), "frames": [_frame(f) for f in t.get("frames", [])[:MAX_FRAMES]]}
            for t in raw if isinstance(t, dict)]


def _frame(f: dict[str, Any]) -> list[Any]:
    return [f.get("name"), short_file(str(f.get("short_filename") or ""), str(f.get("filename") or "")), f.get("line")]


def short_file(short: str, full: str) -> str:
    """py-spy shortens paths relative to sys.path, or to a bare name when it cannot; keep enough
    of the path (from site-packages on) for the rules' suffix match on ``vllm/...``."""
    if "/" in short or "/" not in full:
        return short or full
    for marker in ("site-packages/", "dist-packages/"):
        if marker in full:
            return full.split(marker, 1)[1]
    return "/".join(full.split("/")[-4:])
