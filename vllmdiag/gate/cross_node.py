"""Fleet gate: the node checks on every snapshot plus cross-node consistency (pure).

Cross-node checks (the ``fleet`` scope of ``gate/checks/``: versions, libnccl build, NCCL/vLLM env,
/dev/shm size) give one value per node, compared here with the fleet's most common value; the odd
nodes out fail, nodes without data skip.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from typing import Any

from vllmdiag.gate.config import GateConfig
from vllmdiag.gate.contract import checks
from vllmdiag.gate.result import CheckResult, FleetGateResult, NodeGateResult, result
from vllmdiag.gate.run import gate_snapshot
from vllmdiag.model import Snapshot


def gate_fleet(snapshots_by_node: Mapping[str, Snapshot], config: GateConfig | None = None,
               missing: Mapping[str, str] | None = None) -> FleetGateResult:
    """Gate every node's snapshot, add cross-node checks; `missing` = nodes without a snapshot -> reason."""
    cfg = config or GateConfig()
    nodes = {node: gate_snapshot(snap, cfg) for node, snap in snapshots_by_node.items()}
    summaries = []
    for check in checks("fleet"):
        name = check.name
        if name in cfg.skip:
            continue
        per_node, summary = compare(name, check.what, {n: check(s, cfg) for n, s in snapshots_by_node.items()})
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
