"""What the probes could not see, per pid (pure; issue 15, item 4).

A probe that could not read /proc/<pid>/fd or maps lists those pids in `unreadable_pids`. Absence
of evidence about them (no listener, no mapping) is not evidence: the layers skip critical findings
about a deployment with such pids, and the verdict becomes inconclusive with the fix named.
"""

from __future__ import annotations

import re
from typing import Any

from vllmdiag.model import Snapshot

# Probes whose data is built from per-pid /proc reads, and what they read.
PER_PID = {"sockets": "fds", "endpoints": "fds", "http": "fds", "shm": "memory maps", "rings": "ring segments"}
FIX = ("Re-run as root (or with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH), or as the user the deployment runs as "
       "(sudo -u <that user> vllmdiag triage).")
_DENIED = re.compile(r"ermission|ptrace|denied|EPERM|EACCES|os error 13", re.IGNORECASE)


def unreadable(snapshot: Snapshot, probe: str) -> set[int]:
    pids = snapshot.data(probe).get("unreadable_pids") or []
    return {p for p in pids if isinstance(p, int)} if isinstance(pids, list) else set()


def stacks_denied(snapshot: Snapshot) -> set[int]:
    dumps = snapshot.data("stacks").get("dumps") or []
    return {d["pid"] for d in dumps if isinstance(d, dict) and isinstance(d.get("pid"), int)
            and d.get("status") in ("error", "skipped") and _DENIED.search(str(d.get("reason") or ""))}


def blind(snapshot: Snapshot, pids: set[int], probes: tuple[str, ...] = tuple(PER_PID)) -> set[int]:
    """The pids among `pids` that any of `probes` could not read."""
    out: set[int] = set()
    for probe in probes:
        out |= unreadable(snapshot, probe) & pids
    return out


def gaps(snapshot: Snapshot, pids: set[int]) -> list[str]:
    """One line per probe that could not see some of these pids (for the verdict's evidence)."""
    out = []
    for probe, what in PER_PID.items():
        missed = sorted(unreadable(snapshot, probe) & pids)
        if missed:
            out.append(f"{snapshot.node}: probe {probe} could not read the {what} of pid(s) "
                       f"{_list(missed)} (permission denied)")
    missed = sorted(stacks_denied(snapshot) & pids)
    if missed:
        out.append(f"{snapshot.node}: probe stacks could not read the stacks of pid(s) {_list(missed)} "
                   "(ptrace denied)")
    return out


# What a watcher's pass reads to tell moving from stalled from idle (issue 25 item 3).
WATCH_PROBES = ("processes", "shm", "rings", "sockets", "http")


def progress_blind(snapshot: Snapshot, pids: set[int]) -> str:
    """Why this snapshot cannot tell whether these pids (one deployment) move, with the fix; "" when
    it can. Unread rings, maps or fds look exactly like an idle deployment (nothing in flight), so a
    watcher that could not read them must say "unknown", never "idle"."""
    parts = []
    for probe in WATCH_PROBES:
        res = snapshot.probes.get(probe)
        if res is not None and res.status in ("error", "timeout"):
            parts.append(f"probe {probe} {res.status}: {str(res.reason or '')[:200]}")
            continue
        missed = sorted(unreadable(snapshot, probe) & pids)
        if missed:
            parts.append(f"probe {probe} could not read the {PER_PID.get(probe, 'data')} of pid(s) {_list(missed)} "
                         "(permission denied)")
    if not parts:
        return ""
    denied = any("permission denied" in p for p in parts)
    return "; ".join(parts) + (f". {FIX}" if denied else "")


def hidden_processes(snapshot: Snapshot) -> str | None:
    """A sentence when /proc listed processes the processes probe may not read (hidepid=1): a vLLM may run there."""
    pids = [p for p in snapshot.data("processes").get("unreadable_pids") or [] if isinstance(p, int)]
    return (f"{snapshot.node}: could not read {len(pids)} process(es) listed in /proc (pid {_list(pids)}: permission "
            "denied, /proc mounted with hidepid): a vLLM deployment there would not be seen.") if pids else None


def _list(pids: list[Any]) -> str:
    return ", ".join(map(str, pids[:8])) + (f" (+{len(pids) - 8} more)" if len(pids) > 8 else "")


# The probes each layer's findings are built on (process and gpu read world-readable /proc files
# and stacks, whose blindness the verdict reports on its own).
LAYER_PROBES = {"handshake": ("sockets", "endpoints"), "client": ("http", "sockets"), "queue": ("shm", "rings")}


# Findings decided by a setting in a process's environment (absent, vLLM's default is assumed): with that
# environment denied (the processes probe's environ_unreadable marker) the default is a guess.
ENV_DECIDED = {"process.engine_missing": "VLLM_ENABLE_V1_MULTIPROCESSING",
               "handshake.http_not_listening": "VLLM_ENGINE_READY_TIMEOUT_S",
               "handshake.engine_endpoint_gone": "VLLM_ENABLE_V1_MULTIPROCESSING",
               "handshake.engine_not_registered": "VLLM_ENABLE_V1_MULTIPROCESSING"}


def environ_denied(snapshot: Snapshot) -> set[int]:
    procs = snapshot.data("processes").get("processes") or []
    return {p["pid"] for p in procs if isinstance(p, dict) and isinstance(p.get("pid"), int)
            and p.get("environ_unreadable") == "denied"}


def cap_blind(snapshot: Snapshot, findings: list[Any]) -> None:
    """The safety net under every layer: a critical or warning finding about a pid its probes could
    not read becomes info and says so. Never a confident verdict from a blind probe."""
    env_blind = environ_denied(snapshot)
    for f in findings:
        setting = ENV_DECIDED.get(f.code)
        unseen = sorted(env_blind & set(f.pids)) if setting and f.severity != "info" else []
        if unseen:
            f.severity = "info"
            f.message += (f" (Unconfirmed: {setting} decides this, and the environment of pid(s) {_list(unseen)} "
                          "could not be read; permission denied.)")
            f.evidence["environ_unreadable_pids"] = unseen
        probes = LAYER_PROBES.get(f.layer)
        if not probes or f.severity == "info":
            continue
        missed = blind(snapshot, set(f.pids) | {c.pid for c in f.culprits if isinstance(c.pid, int)}, probes)
        if missed:
            f.severity = "info"
            f.message += (f" (Unconfirmed: {', '.join(probes)} could not read pid(s) {_list(sorted(missed))}; "
                          "permission denied.)")
            f.evidence["unreadable_pids"] = sorted(missed)
