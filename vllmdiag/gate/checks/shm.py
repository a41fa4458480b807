"""shm_capacity, shm_leaks, stale_sockets: what earlier runs left on the host, and room for the next.

A check whose probe is absent or could not run says `skip` with the probe's reason; it never
guesses (so every module of ``gate/checks/``; the contract: ``gate/contract.py``).
"""

from __future__ import annotations

from vllmdiag.gate.common import probe_problem, vllm_processes
from vllmdiag.gate.config import GateConfig
from vllmdiag.gate.contract import GateCheck
from vllmdiag.gate.result import CheckResult, result
from vllmdiag.gate.shm_sizing import human_bytes, ring_bytes
from vllmdiag.model import Snapshot
from vllmdiag.vocab.shm_names import by_kind, leftovers, unseen_maps


def check_shm_capacity(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "shm_capacity"
    problem = probe_problem(snap, "host")
    usage = snap.data("host").get("dev_shm") or {}
    if problem or "free_bytes" not in usage:
        return result(name, "skip", problem or f"/dev/shm unreadable: {usage.get('error', 'no data')}")
    env = _deployment_env(snap)
    try:
        chunk_mb = int(env.get("VLLM_MQ_MAX_CHUNK_BYTES_MB") or 16)
    except ValueError:
        chunk_mb = 16
    rings = ring_bytes(cfg.tp, chunk_mb)
    # A running deployment's rings are already in /dev/shm: only what is not there yet must fit.
    live = sum(s.get("size_bytes", 0) for s in snap.data("shm").get("segments", []) if s.get("kind") == "psm"
               and s.get("mapped_by"))
    headroom = cfg.shm_headroom_bytes if cfg.tp > 1 else 0
    need = max(0, rings["total"] - live) + headroom
    free, size = int(usage["free_bytes"]), int(usage.get("size_bytes") or 0)
    numbers = {"tp": cfg.tp, "free_bytes": free, "size_bytes": size, "need_bytes": need, "rings_bytes": rings,
               "live_ring_bytes": live, "headroom_bytes": headroom, "path": usage.get("path")}
    summary = (f"{usage.get('path', '/dev/shm')} has {human_bytes(free)} free of {human_bytes(size)}; TP={cfg.tp} needs "
               f"{human_bytes(need)} (rings {human_bytes(rings['total'])}"
               + (f", {human_bytes(live)} of them already allocated" if live else "")
               + f", headroom {human_bytes(headroom)})")
    if free < need:
        return result(name, "fail", summary + ": vLLM 0.33 refuses to start ('Insufficient space in /dev/shm'), "
                      "older versions die of SIGBUS later; raise --shm-size or use --ipc=host", **numbers)
    return result(name, "pass", summary, **numbers)


def check_shm_leaks(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "shm_leaks"
    problem = probe_problem(snap, "shm")
    if problem:
        return result(name, "skip", problem)
    # The same list as triage's queue.shm_leaked (vllmdiag/vocab/shm_names.py): one node, one answer (issue 33).
    leaked = leftovers(snap.data("shm").get("segments", []), cfg.shm_leak_min_age_s)
    total = sum(int(s.get("size_bytes") or 0) for s in leaked)
    allocated = sum(int(s.get("allocated_bytes") or 0) for s in leaked)
    numbers = {"leaked": len(leaked), "size_bytes": total, "allocated_bytes": allocated,
               "segments": [{k: s.get(k) for k in ("name", "path", "kind", "what", "size_bytes", "allocated_bytes", "age_s")}
                            for s in leaked[:50]]}
    if not leaked:
        return result(name, "pass", "no unmapped vLLM rings, CPU all-reduce buffers, nccl-/vllm_* segments or "
                      "multiprocessing semaphores in /dev/shm", **numbers)
    names = ", ".join(s.get("name") or s.get("path", "?") for s in leaked[:5]) + (" ..." if len(leaked) > 5 else "")
    said = (f"{len(leaked)} segment(s) mapped by no process hold {human_bytes(allocated)} ({human_bytes(total)} "
            f"apparent; {by_kind(leaked)}): {names}")
    unseen = unseen_maps(snap.data("shm"))
    if unseen:  # as triage says it: a process whose maps we could not read may still use them
        return result(name, "warn", f"{said}; unsure: the memory maps of {unseen} process(es) could not be read "
                      "(permission denied), so some may still be in use; run as root to know", unreadable_maps=unseen,
                      **numbers)
    return result(name, "fail", f"{said}; leftovers of a killed run (llm-d #352, vllm #51579); remove them once "
                  "no vLLM runs", **numbers)


def check_stale_sockets(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "stale_sockets"
    problem = probe_problem(snap, "preflight")
    if problem:
        return result(name, "skip", problem)
    base = snap.data("preflight").get("rpc_base") or {}
    stale = list(base.get("stale_sockets") or [])
    numbers = {"path": base.get("path"), "stale": len(stale), "socket_files": base.get("socket_files", 0),
               "examples": stale[:20]}
    if not stale:
        return result(name, "pass", f"no stale socket files in {base.get('path')}", **numbers)
    # vLLM never unlinks its ipc:// files; harmless by themselves, but they pile up and confuse triage.
    return result(name, "warn", f"{len(stale)} socket file(s) in {base.get('path')} nobody listens on "
                  "(left by earlier vLLM runs)", **numbers)


def _deployment_env(snap: Snapshot) -> dict[str, str]:
    procs = vllm_processes(snap)
    if procs:
        return dict(procs[0].get("environ") or {})
    return dict(snap.data("preflight").get("env") or {})


GATE_CHECKS = (
    GateCheck("shm_capacity", "node", "host", check_shm_capacity),
    GateCheck("shm_leaks", "node", "host", check_shm_leaks),
    GateCheck("stale_sockets", "node", "host", check_stale_sockets, advisory=True),
)
