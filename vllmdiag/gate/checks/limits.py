"""Checks of what the node hands a deployment: fd and pid limits, ptrace permission, py-spy."""

from __future__ import annotations

from vllmdiag.gate.common import probe_problem, vllm_processes
from vllmdiag.gate.config import GateConfig
from vllmdiag.gate.contract import GateCheck
from vllmdiag.gate.result import CheckResult, result
from vllmdiag.model import Snapshot


def check_nofile(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "nofile_limit"
    procs = [p for p in vllm_processes(snap) if p.get("rlimit_nofile")]
    if procs:
        # Running: vLLM already raised its soft limit (set_ulimit), so the soft limit is what it has.
        worst = min(procs, key=lambda p: p["rlimit_nofile"][0] or 1 << 62)
        limit, source = worst["rlimit_nofile"][0], f"pid {worst['pid']} ({worst.get('name') or worst.get('role')}) soft"
    else:
        problem = probe_problem(snap, "preflight")
        if problem:
            return result(name, "skip", problem)
        # Not running yet: vLLM raises the soft limit up to min(65535, hard), so the hard limit counts.
        limit, source = (snap.data("preflight").get("rlimits", {}).get("nofile") or [None, None])[1], "hard (this shell)"
    numbers = {"limit": limit, "source": source, "min": cfg.nofile_min, "recommended": cfg.nofile_recommended}
    shown = "unlimited" if limit is None else str(limit)
    if limit is not None and limit < cfg.nofile_min:
        return result(name, "fail", f"RLIMIT_NOFILE {source} is {shown} < {cfg.nofile_min}: "
                      "'Too many open files' under load; raise it (ulimit -n, LimitNOFILE=, --ulimit nofile=)", **numbers)
    if limit is not None and limit < cfg.nofile_recommended:
        return result(name, "warn", f"RLIMIT_NOFILE {source} is {shown} < {cfg.nofile_recommended} that vLLM asks for "
                      "(set_ulimit logs 'failed to automatically increase')", **numbers)
    return result(name, "pass", f"RLIMIT_NOFILE {source} is {shown}", **numbers)


def check_pids(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "pids_limit"
    problem = probe_problem(snap, "preflight")
    if problem:
        return result(name, "skip", problem)
    facts = snap.data("preflight")
    host = snap.data("host")
    room: dict[str, int] = {}
    cg = facts.get("cgroup_pids") or {}
    if cg.get("max") is not None:
        used = cg.get("current") or 0
        room[f"cgroup pids.max {cg['max']} ({cg.get('path')}) minus {used} in use"] = cg["max"] - used
    nproc = (facts.get("rlimits", {}).get("nproc") or [None])[0]
    # RLIMIT_NPROC is not enforced for root (CAP_SYS_RESOURCE/CAP_SYS_ADMIN), so it only counts for others.
    if nproc is not None and host.get("euid") != 0:
        room[f"ulimit -u {nproc}"] = nproc
    in_use = int(snap.data("processes").get("pid_count") or 0)
    for key in ("pid_max", "threads_max"):
        if host.get(key):
            room[f"kernel {key} {host[key]} minus {in_use} processes"] = int(host[key]) - in_use
    numbers = {"min": cfg.pids_min, "limits": room, "ulimit_u": nproc, "cgroup": cg}
    if not room:
        return result(name, "pass", "no pids limit found", **numbers)
    tightest = min(room, key=lambda k: room[k])
    if room[tightest] < cfg.pids_min:
        return result(name, "fail", f"{tightest} leaves {room[tightest]} pids/threads < {cfg.pids_min}: torch/NCCL "
                      "threads of TP workers fail with 'can't start new thread'", **numbers)
    return result(name, "pass", f"tightest limit: {tightest} leaves {room[tightest]}", **numbers)


def check_ptrace(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "ptrace"
    problem = probe_problem(snap, "host")
    if problem:
        return result(name, "skip", problem)
    host = snap.data("host")
    euid, scope, cap = host.get("euid"), host.get("ptrace_scope"), host.get("cap_sys_ptrace")
    numbers = {"euid": euid, "ptrace_scope": scope, "cap_sys_ptrace": cap}
    fix = "run triage as root with CAP_SYS_PTRACE (docker --cap-add SYS_PTRACE, kubectl debug --profile=general)"
    if scope == 3:
        return result(name, "fail", "yama ptrace_scope=3: no process can be traced until reboot; triage sees no stacks",
                      **numbers)
    if cap:
        yama = f"yama ptrace_scope={scope}" if scope is not None else "no Yama LSM (no ptrace_scope)"
        return result(name, "pass", f"CAP_SYS_PTRACE held ({yama})", **numbers)
    if scope in (1, 2):
        return result(name, "fail", f"yama ptrace_scope={scope} without CAP_SYS_PTRACE: py-spy cannot attach; {fix}",
                      **numbers)
    if euid == 0:
        return result(name, "pass", "root, classic ptrace rules (same user namespace)", **numbers)
    return result(name, "warn", f"uid {euid} can trace only its own processes; {fix}", **numbers)


def check_pyspy(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "pyspy"
    problem = probe_problem(snap, "preflight")
    if problem:
        return result(name, "skip", problem)
    info = snap.data("preflight").get("pyspy") or {}
    if info.get("version"):
        return result(name, "pass", f"py-spy {info['version']} at {info.get('path')}", **info)
    return result(name, "fail", f"py-spy unusable ({info.get('error') or 'unknown'}): triage cannot read stacks; "
                  "pip install py-spy", **info)


GATE_CHECKS = (
    GateCheck("nofile_limit", "node", "limits", check_nofile),
    GateCheck("pids_limit", "node", "limits", check_pids),
    GateCheck("ptrace", "node", "limits", check_ptrace, advisory=True),
    GateCheck("pyspy", "node", "limits", check_pyspy, advisory=True),
)
