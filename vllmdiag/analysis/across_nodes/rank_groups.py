"""Rank groups that span nodes (multi-node TP/PP, DP across nodes), joined and checked as one (pure).

Each node alone sees only its share of a multi-node group (node-rank 1 of a TP=8 group runs
``Worker_TP4``..``Worker_TP7``), so its process layer reports the other node's ranks as missing.
Here the shares are joined by the rendezvous address the group's command lines carry
(``--master-addr``/``--master-port``, ``--data-parallel-address``/``--data-parallel-rpc-port``,
or ``MASTER_ADDR``/``MASTER_PORT`` in the environment), the node-local ``process.rank_missing``
findings are replaced by one check over the union, and ranks that live on a node that did not
answer are attributed to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmdiag.analysis.views.deployments import Deployment
from vllmdiag.model import Culprit, Finding

CODES = ("fleet.rank_missing", "fleet.ranks_unseen")
_ADDR_FLAGS = (("--master-addr", "--master-port"), ("--data-parallel-address", "--data-parallel-rpc-port"))


@dataclass
class Member:
    node: str
    deployment: Deployment
    node_rank: int | None
    nnodes: int | None
    headless: bool = False


@dataclass
class RankGroup:
    key: str
    members: list[Member] = field(default_factory=list)

    @property
    def nodes(self) -> list[str]:
        return sorted({m.node for m in self.members})

    @property
    def nnodes(self) -> int:
        return max([m.nnodes or 1 for m in self.members] + [len(self.nodes)])


def group_key(dep: Deployment) -> tuple[str | None, int | None, int | None]:
    """(rendezvous key, node rank, nnodes) from the deployment's command lines and environment."""
    key = None
    node_rank = nnodes = None
    for proc in dep.processes:
        argv = [str(a) for a in proc.get("cmdline") or []]
        flags = _flags(argv)
        for addr_flag, port_flag in _ADDR_FLAGS:
            if key is None and (addr_flag in flags or port_flag in flags):
                # vLLM's --master-addr defaults to 127.0.0.1; the port alone still names the group.
                key = f"{flags.get(addr_flag, '127.0.0.1')}:{flags.get(port_flag, '')}"
        node_rank = node_rank if node_rank is not None else _int(flags.get("--node-rank"))
        nnodes = nnodes if nnodes is not None else _int(flags.get("--nnodes"))
        env = proc.get("environ") or {}
        if key is None and env.get("MASTER_ADDR") and _int(env.get("WORLD_SIZE")) not in (None, 1):
            key = f"{env['MASTER_ADDR']}:{env.get('MASTER_PORT', '')}"
    if key is not None and (nnodes or 1) <= 1 and node_rank in (None, 0):
        key = None if "--headless" not in _all_args(dep) else key
    return key, node_rank, nnodes


def join(per_node: dict[str, list[Deployment]]) -> list[RankGroup]:
    groups: dict[str, RankGroup] = {}
    for node, deps in per_node.items():
        for dep in deps:
            key, node_rank, nnodes = group_key(dep)
            if key is not None:
                member = Member(node, dep, node_rank, nnodes, "--headless" in _all_args(dep))
                groups.setdefault(key, RankGroup(key)).members.append(member)
    return sorted(groups.values(), key=lambda g: g.key)


def check(group: RankGroup, failed_nodes: dict[str, str]) -> list[Finding]:
    """Findings over the union of the group's ranks; ``failed_nodes`` maps unanswered nodes to why."""
    present: dict[tuple[int, int, int], set[int]] = {}
    size = 0
    for m in group.members:
        size = max(size, m.deployment.configured.get("tp", 0))
        for w in m.deployment.workers:
            ranks = w.get("ranks") or {}
            if "tp" in ranks and w.get("state") not in ("Z", "X"):
                present.setdefault((ranks.get("dp", 0), ranks.get("pp", 0), ranks.get("pcp", 0)), set()).add(int(ranks["tp"]))
    head = min(group.members, key=lambda m: (m.node_rank if m.node_rank is not None else 1 << 30, m.node))
    seen_ranks = {m.node_rank for m in group.members if m.node_rank is not None}
    unseen = [r for r in range(group.nnodes) if r not in seen_ranks] if seen_ranks else []
    out = []
    for key, tps in sorted(present.items()):
        missing = [r for r in range(max(size, max(tps) + 1)) if r not in tps]
        if missing:
            out.append(_missing(group, head, key, missing, unseen, failed_nodes))
    return out


def _missing(group: RankGroup, head: Member, key: tuple[int, int, int], missing: list[int], unseen: list[int],
             failed: dict[str, str]) -> Finding:
    where = "" if key == (0, 0, 0) else f" (DP{key[0]} PP{key[1]})"
    ranks = ",".join(map(str, missing))
    suspects = sorted(failed)
    if suspects:
        blame = suspects[0] if len(suspects) == 1 else "one of " + ",".join(suspects)
        code, severity = "fleet.ranks_unseen", "warning"
        message = (f"TP group {group.key}{where} on {','.join(group.nodes)}: ranks TP{ranks} not seen; "
                   f"they are presumably on {blame}, which did not answer ({failed[suspects[0]]}).")
        reason = "node did not answer; its ranks cannot be checked"
    else:
        blame = "?"
        code, severity = "fleet.rank_missing", "critical"
        nodes_hint = f" node-rank(s) {','.join(map(str, unseen))} not found on any swept node;" if unseen else ""
        message = (f"TP group {group.key}{where} on {','.join(group.nodes)}: worker rank(s) TP{ranks} missing "
                   f"on every node;{nodes_hint} each node saw only its own share.")
        reason = "worker rank missing across the whole multi-node group"
    culprits = [Culprit(node=blame, pid=None, role="worker", rank=r, title=f"VLLM::Worker_TP{r}", reason=reason)
                for r in missing]
    evidence: dict[str, Any] = {"group": group.key, "nodes": group.nodes, "missing_tp_ranks": missing,
                                "unseen_node_ranks": unseen, "unanswered_nodes": suspects}
    return Finding(code=code, layer="process", severity=severity, node=head.node, message=message, pids=[],
                   evidence=evidence, deployment=head.deployment.id, culprits=culprits)


def _flags(argv: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, arg in enumerate(argv):
        name, eq, inline = arg.partition("=")
        if name.startswith("--"):
            out.setdefault(name, inline if eq else (argv[i + 1] if i + 1 < len(argv) else ""))
    return out


def _all_args(dep: Deployment) -> set[str]:
    return {str(a) for p in dep.processes for a in p.get("cmdline") or []}


def _int(value: Any) -> int | None:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None
