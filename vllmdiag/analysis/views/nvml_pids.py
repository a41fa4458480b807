"""Which local process each NVML process is (pure; issue 14 item 5: vllmdiag run inside a pod).

NVML names a GPU's processes by their pids in the host's namespace, even when asked from inside a
container: the driver ignores PID namespaces (NVIDIA/nvidia-docker#1483). From the host, or a pod
with ``hostPID: true``, those are our pids. From inside a pod they are not: a host pid is missing
here or, worse, is the number of an unrelated local process. So inside a pod a number is never
matched to a local pid on its own; the evidence is which local processes hold the GPU's device
node (``/dev/nvidia<minor>``, probe nvml's ``device_fds``):

- every NVML pid is a local process holding that same GPU: the numbers are ours; use them;
- else a GPU held here by one local process that holds no other GPU with a different NVML process
  on it: that process (NVML's per-process memory goes with it, as supporting evidence);
- else the GPU is held by several local processes together (CUDA opens every visible GPU's node in
  each process): enough to tie it to a deployment, not to one process. Said so, with the fix.

Snapshots without ``pid_namespace`` (older ones) and the host's namespace keep the direct reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INIT_PID_NS = "pid:[4026531836]"  # PROC_PID_INIT_INO (include/linux/proc_ns.h); as in probes/_gpu_fds.py
FIX = ("run vllmdiag from the host, or from a pod in the host's PID namespace (hostPID: true; "
       "`kubectl debug node/<node> -it --profile=sysadmin --image=<an image with vllmdiag>`)")


@dataclass
class PidMap:
    mode: str  # "host": NVML's pids are ours | "pod": read through device nodes | "blind": no way to map
    gpu_of: dict[int, int] = field(default_factory=dict)  # local pid -> GPU index it computes on (exact only)
    held_by: dict[int, list[int]] = field(default_factory=dict)  # GPU index -> local pids holding its node
    local_of: dict[int, int | None] = field(default_factory=dict)  # NVML pid -> local pid (None: unknown)
    outside: set[int] = field(default_factory=set)  # NVML pids on GPUs no local process holds: not ours
    notes: list[str] = field(default_factory=list)  # what could not be attributed, one line each

    def held(self, pids: set[int]) -> set[int]:
        """GPU indices these local processes compute on or hold open (a deployment's GPUs)."""
        return {g for p, g in self.gpu_of.items() if p in pids} | {g for g, hs in self.held_by.items()
                                                                   if pids & set(hs)}


def pid_map(nvml: dict[str, Any], procs: list[dict[str, Any]]) -> PidMap:
    ns = nvml.get("pid_namespace")
    gpus = [g for g in nvml.get("gpus") or [] if isinstance(g, dict) and isinstance(g.get("index"), int)]
    if procfs_namespace(ns) in (INIT_PID_NS, None):
        return _direct(gpus, procs)
    fds = nvml.get("device_fds")
    if not isinstance(fds, dict) or not isinstance(fds.get("holders"), dict):
        out = PidMap("blind", local_of={p: None for g in gpus for p in _pids(g)})
        if out.local_of:
            out.notes.append("Which processes hold the GPU device nodes could not be read, so no NVML (host) pid "
                             "is attributed; " + FIX + ".")
        return out
    return _pod(gpus, fds)


def procfs_namespace(ns: Any) -> str | None:
    """The pid namespace our /proc numbers: its pid 1's; when that link is unreadable (pid 1 may be
    another user's, or not dumpable), ours if our NSpid has one entry (we live in that namespace)."""
    if not isinstance(ns, dict):
        return None
    if isinstance(ns.get("proc_1"), str):
        return str(ns["proc_1"])
    nspid = ns.get("self_nspid")
    return str(ns["self"]) if isinstance(nspid, list) and len(nspid) == 1 and isinstance(ns.get("self"), str) else None


def gpu_by_pid(nvml: dict[str, Any], procs: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Local pid -> the NVML record of the GPU it computes on (exact attributions only)."""
    by_index = {g["index"]: g for g in nvml.get("gpus") or [] if isinstance(g, dict) and isinstance(g.get("index"), int)}
    return {p: by_index[i] for p, i in pid_map(nvml, procs).gpu_of.items() if i in by_index}


def _pids(g: dict[str, Any]) -> list[int]:
    return [e["pid"] for e in g.get("processes") or [] if isinstance(e, dict) and isinstance(e.get("pid"), int)]


def _direct(gpus: list[dict[str, Any]], procs: list[dict[str, Any]]) -> PidMap:
    """NVML's pids are pids of our /proc. A pid we do not list may still be a containerised process
    named by its inner pid (a saved snapshot from a nested setup): found through its NSpid chain."""
    listed = {p["pid"] for p in procs if isinstance(p.get("pid"), int)}
    alias: dict[int, int] = {}
    for p in procs:
        for a in p.get("nspid") or [] if isinstance(p.get("pid"), int) else []:
            if isinstance(a, int) and a != p["pid"]:
                alias.setdefault(a, p["pid"])
    out = PidMap("host")
    for g in gpus:
        for pid in _pids(g):
            local = pid if pid in listed else alias.get(pid, pid)
            out.local_of[pid] = local
            out.gpu_of.setdefault(local, g["index"])
    return out


def _pod(gpus: list[dict[str, Any]], fds: dict[str, Any]) -> PidMap:
    holders: dict[int, set[int]] = {}  # minor -> local pids
    for pid, minors in fds["holders"].items():
        for m in minors if isinstance(minors, list) else []:
            if str(pid).isdigit() and isinstance(m, int):
                holders.setdefault(m, set()).add(int(pid))
    out = PidMap("pod")
    by_gpu = {g["index"]: (sorted(holders.get(g["minor_number"], set())) if isinstance(g.get("minor_number"), int)
                           else None, _pids(g)) for g in gpus}
    for idx, (held, pids) in by_gpu.items():
        if held:
            out.held_by[idx] = held
        elif held is not None and not fds.get("unreadable_pids"):
            out.outside |= set(pids)
    if all(held is not None and pid in held for held, pids in by_gpu.values() for pid in pids):
        for idx, (_, pids) in by_gpu.items():  # every NVML pid is a local holder of its GPU: ours
            for pid in pids:
                out.local_of[pid] = pid
                out.gpu_of.setdefault(pid, idx)
        return out
    if not fds.get("unreadable_pids"):  # a process whose fds we could not read may hold the GPU too
        _sole_holders(by_gpu, out)
    for _, pids in by_gpu.values():
        for pid in pids:
            out.local_of.setdefault(pid, None)
    _explain(by_gpu, fds, out)
    return out


def _sole_holders(by_gpu: dict[int, tuple[list[int] | None, list[int]]], out: PidMap) -> None:
    """A local process that is the only holder of its GPUs, all of them named by one NVML pid, is
    that NVML process. Two different NVML pids on GPUs it alone holds: it is at most one of them."""
    sole: dict[int, list[int]] = {}
    for idx, (held, pids) in by_gpu.items():
        if held is not None and len(held) == 1 and pids:
            sole.setdefault(held[0], []).append(idx)
    for local, idxs in sole.items():
        named = {pid for i in idxs for pid in by_gpu[i][1]}
        if len(named) == 1 and all(len(by_gpu[i][1]) == 1 for i in idxs):
            out.local_of[named.pop()] = local
            out.gpu_of[local] = min(idxs)


def _explain(by_gpu: dict[int, tuple[list[int] | None, list[int]]], fds: dict[str, Any], out: PidMap) -> None:
    lost = [(i, pids, held) for i, (held, pids) in sorted(by_gpu.items())
            if pids and not any(out.local_of.get(p) is not None for p in pids)]
    if not lost:
        return
    parts = []
    for idx, pids, held in lost:
        if held is None:
            parts.append(f"GPU{idx}: NVML gave no device minor number")
        elif not held:
            parts.append(f"GPU{idx}: held by no process here (host pid(s) {_list(pids)} live outside this namespace)")
        else:
            parts.append(f"GPU{idx}: held by local pid(s) {_list(held)} together, NVML names host pid(s) {_list(pids)}")
    denied = fds.get("unreadable_pids") or []
    why = f"; the fds of local pid(s) {_list(denied)} were unreadable" if denied else ""
    out.notes.append("; ".join(parts) + why + ". Per-process GPU figures there are not attributed; " + FIX + ".")


def _list(pids: list[Any]) -> str:
    return ", ".join(map(str, pids[:8])) + (f" (+{len(pids) - 8} more)" if len(pids) > 8 else "")
