"""Fleet gate: the node checks on every snapshot plus cross-node consistency (pure).

Cross-node checks compare one value per node (versions, libnccl build, NCCL/vLLM env, /dev/shm size)
with the fleet's most common value; the odd nodes out fail, nodes without data skip. Ranks of one
job on nodes with different NCCL builds or settings have hung vLLM (issue #41725).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from vllmdiag.gate.common import vllm_processes
from vllmdiag.gate.config import GateConfig
from vllmdiag.gate.result import CheckResult, FleetGateResult, NodeGateResult, result
from vllmdiag.gate.run import gate_snapshot
from vllmdiag.model import Snapshot

Extract = Callable[[Snapshot, GateConfig], Any]


def _versions(snap: Snapshot, cfg: GateConfig) -> Any:
    return snap.data("libs").get("packages") or None


def _libnccl(snap: Snapshot, cfg: GateConfig) -> Any:
    libs = snap.data("libs").get("nccl") or []
    return {lib["path"]: lib.get("build_id") for lib in libs} or None


def _env(snap: Snapshot, cfg: GateConfig) -> Any:
    procs = vllm_processes(snap)
    env = (procs[0].get("environ") if procs else snap.data("preflight").get("env")) or {}
    keep = {k: v for k, v in env.items() if k.startswith(("NCCL_", "VLLM_", "TORCH_NCCL", "CUDA_"))
            and k not in cfg.allowed_env_differences}
    return keep if (procs or "preflight" in snap.probes) else None


def _shm_size(snap: Snapshot, cfg: GateConfig) -> Any:
    return (snap.data("host").get("dev_shm") or {}).get("size_bytes")


FLEET: dict[str, tuple[Extract, str]] = {
    "fleet_versions": (_versions, "vLLM/torch/NCCL package versions"),
    "fleet_libnccl": (_libnccl, "libnccl path and ELF build-id"),
    "fleet_env": (_env, "NCCL_/VLLM_/CUDA_ environment"),
    "fleet_shm_size": (_shm_size, "/dev/shm size"),
}


def gate_fleet(snapshots_by_node: Mapping[str, Snapshot], config: GateConfig | None = None,
               missing: Mapping[str, str] | None = None) -> FleetGateResult:
    """Gate every node's snapshot, add cross-node checks; `missing` = nodes without a snapshot -> reason."""
    cfg = config or GateConfig()
    nodes = {node: gate_snapshot(snap, cfg) for node, snap in snapshots_by_node.items()}
    summaries = []
    for name, (extract, what) in FLEET.items():
        if name in cfg.skip:
            continue
        per_node, summary = compare(name, what, {n: extract(s, cfg) for n, s in snapshots_by_node.items()})
        for node, res in per_node.items():
            res.required = cfg.required(name)
            nodes[node].checks.append(res)
        summary.required = cfg.required(name)
        summaries.append(summary)
    for node, reason in (missing or {}).items():
        nodes[node] = NodeGateResult(node, [result("collect", "fail", f"no snapshot: {reason}")])
    return FleetGateResult(nodes, summaries)


def compare(name: str, what: str, values: dict[str, Any]) -> tuple[dict[str, CheckResult], CheckResult]:
    keyed = {n: _key(v) for n, v in values.items() if v is not None}
    groups: dict[str, list[str]] = {}
    for node, key in sorted(keyed.items()):
        groups.setdefault(key, []).append(node)
    out: dict[str, CheckResult] = {}
    if not groups:
        for node in values:
            out[node] = result(name, "skip", f"no {what} in this snapshot")
        return out, result(name, "skip", f"no node reported its {what}")
    majority = Counter(keyed.values()).most_common(1)[0][0]
    common = json.loads(majority)
    for node, value in values.items():
        if value is None:
            out[node] = result(name, "skip", f"no {what} in this snapshot")
        elif keyed[node] == majority:
            out[node] = result(name, "pass", f"{what} same as {len(groups[majority])} of {len(keyed)} node(s)",
                               value=value)
        else:
            out[node] = result(name, "fail", f"{what} differs from {fold(groups[majority])}: {describe(value, common)}",
                               value=value, majority=common)
    folded = {fold(nodes): json.loads(key) for key, nodes in groups.items()}
    if len(groups) == 1:
        return out, result(name, "pass", f"{what} identical on {fold(groups[majority])}", groups=folded)
    odd = sorted(n for key, ns in groups.items() if key != majority for n in ns)
    return out, result(name, "fail", f"{what} differs on {fold(odd)} from {fold(groups[majority])}", groups=folded)


def describe(value: Any, common: Any) -> str:
    if isinstance(value, dict) and isinstance(common, dict):
        keys = sorted(k for k in set(value) | set(common) if value.get(k) != common.get(k))
        return ", ".join(f"{k}={value.get(k, '<unset>')} (others {common.get(k, '<unset>')})" for k in keys[:8])
    return f"{value} (others {common})"


def fold(nodes: list[str]) -> str:
    try:
        from ClusterShell.NodeSet import NodeSet

        return str(NodeSet.fromlist(nodes))
    except Exception:  # ClusterShell missing or a name it cannot parse: plain list is still right
        return ",".join(sorted(nodes))


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)
