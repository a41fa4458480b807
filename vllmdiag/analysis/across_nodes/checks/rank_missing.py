"""The ranks of a multi-node group checked over the union of its nodes (pure): a TP rank missing on every
node, or presumably on a node that did not answer. A cross-node group check (analysis/across_nodes/checks/)."""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.across_nodes.rank_groups import Member, RankGroup
from vllmdiag.analysis.facts import Facts
from vllmdiag.model import Culprit, Finding

CODES = ("fleet.rank_missing", "fleet.ranks_unseen")


def check(group: RankGroup, failed_nodes: dict[str, str], empty_nodes: list[str] | None = None) -> list[Finding]:
    """Findings over the union of the group's ranks; ``failed_nodes`` maps unanswered nodes to why;
    ``empty_nodes`` answered the sweep and run no vLLM at all (where a missing node-rank presumably ran)."""
    present: dict[tuple[int, int, int], set[int]] = {}
    size = max((int(m.deployment.configured.get("tp") or 0) for m in group.members), default=0)
    for m in group.members:
        for w in m.deployment.workers:
            ranks = dict(w.get("ranks") or {})
            if "tp" not in ranks and "pp" in ranks and size <= 1:
                ranks["tp"] = 0  # PP without TP: `VLLM::Worker_PPn` is TP rank 0 of stage n
            if "tp" in ranks and w.get("state") not in ("Z", "X"):
                present.setdefault((ranks.get("dp", 0), ranks.get("pp", 0), ranks.get("pcp", 0)), set()).add(int(ranks["tp"]))
    head = min(group.members, key=lambda m: (m.node_rank if m.node_rank is not None else 1 << 30, m.node))
    seen_ranks = {m.node_rank for m in group.members if m.node_rank is not None}
    unseen = [r for r in range(group.nnodes) if r not in seen_ranks] if seen_ranks else []
    out = []
    for key, tps in sorted(present.items()):
        missing = [r for r in range(max(size, max(tps) + 1)) if r not in tps]
        if missing:
            out.append(_missing(group, head, key, missing, unseen, failed_nodes, empty_nodes or []))
    stages = max((int(m.deployment.configured.get("pp") or 1) for m in group.members), default=1)
    gone = [p for p in range(stages) if present and p not in {k[1] for k in present}]
    if gone:  # a whole pipeline stage on no node (PP across the nodes: a node's share is its stage)
        out.append(_missing(group, head, (0, -1, 0), gone, unseen, failed_nodes, empty_nodes or []))
    return out


def _missing(group: RankGroup, head: Member, key: tuple[int, int, int], missing: list[int], unseen: list[int],
             failed: dict[str, str], empty: list[str]) -> Finding:
    unit = "PP" if key[1] < 0 else "TP"  # key (0, -1, 0): whole pipeline stages missing
    where = "" if key[1] < 0 or key == (0, 0, 0) else f" (DP{key[0]} PP{key[1]})"
    ranks = ",".join(map(str, missing))
    suspects = sorted(failed)
    if suspects:
        blame = suspects[0] if len(suspects) == 1 else "one of " + ",".join(suspects)
        code, severity = "fleet.ranks_unseen", "warning"
        message = (f"{unit} group {group.key}{where} on {','.join(group.nodes)}: ranks {unit}{ranks} not seen; "
                   f"they are presumably on {blame}, which did not answer ({failed[suspects[0]]}).")
        reason = "node did not answer; its ranks cannot be checked"
    else:
        blame = "?"
        code, severity = "fleet.rank_missing", "critical"
        nodes_hint = f" node-rank(s) {','.join(map(str, unseen))} not found on any swept node;" if unseen else ""
        home = ""
        reason = "worker rank missing across the whole multi-node group"
        homes = _homes(group, [_global(group, key, r) for r in missing])
        if homes and not unseen:
            # Every node-rank answered: the missing TP rank belongs to a node-rank's share (ranks are laid out
            # node by node), and that node runs its `vllm serve` without the worker.
            blame = homes[0] if len(homes) == 1 else "one of " + ",".join(homes)
            home = f" by the node-rank layout {blame} should run it and does not;"
            reason = f"{reason}; {blame} should run it (node-rank layout) and does not"
        elif unseen and empty:
            # A swept node that answered with no vLLM at all is where the unseen node-rank presumably ran
            # (seen live: a headless node whose worker was killed shuts its `vllm serve --headless` down).
            named = ",".join(empty[:4]) + ("..." if len(empty) > 4 else "")
            home = (f" {named} answered and run{'s' if len(empty) == 1 else ''} no vLLM at all: its share "
                    "(the headless `vllm serve` and its workers) presumably died there;")
            if len(empty) == len(unseen) == 1:
                blame, reason = empty[0], f"{reason}; {empty[0]} runs no vLLM (its share presumably died)"
        message = (f"{unit} group {group.key}{where} on {','.join(group.nodes)}: worker rank(s) {unit}{ranks} missing "
                   f"on every node;{nodes_hint}{home} each node saw only its own share.")
    culprits = [Culprit(node=blame, pid=None, role="worker", rank=r, title=f"VLLM::Worker_{unit}{r}", reason=reason)
                for r in missing]
    evidence: dict[str, Any] = {"group": group.key, "nodes": group.nodes, f"missing_{unit.lower()}_ranks": missing,
                                "unseen_node_ranks": unseen, "unanswered_nodes": suspects,
                                "answered_without_vllm": empty[:16]}
    return Finding(code=code, layer="process", severity=severity, node=head.node, message=message, pids=[],
                   evidence=evidence, deployment=head.deployment.id, culprits=culprits)


def _sizes(group: RankGroup) -> tuple[int, int]:
    tp = max((int(m.deployment.configured.get("tp") or 1) for m in group.members), default=1)
    return tp, max((int(m.deployment.configured.get("pp") or 1) for m in group.members), default=1)


def _global(group: RankGroup, key: tuple[int, int, int], rank: int) -> int:
    """World rank of TP rank ``rank`` of stage key[1] (TP fastest, then PP), or of stage ``rank`` itself
    for a whole stage missing (key[1] < 0: its TP rank 0)."""
    tp, _ = _sizes(group)
    return rank * tp if key[1] < 0 else key[1] * tp + rank


def _homes(group: RankGroup, missing: list[int]) -> list[str]:
    """Nodes whose node-rank holds the missing world ranks, laid out node by node (node-rank R runs world
    ranks R*per .. R*per+per-1, TP fastest, then PP); [] when DP makes the layout ambiguous."""
    tp, pp = _sizes(group)
    size = tp * pp
    if any(int(m.deployment.configured.get("dp") or 1) > 1 for m in group.members):
        return []
    if size < group.nnodes or size % group.nnodes:
        return []
    per = size // group.nnodes
    by_rank = {m.node_rank: m.node for m in group.members if m.node_rank is not None}
    return sorted({by_rank[r // per] for r in missing if r // per in by_rank})


def check_group(group: RankGroup, facts: dict[str, Facts], failed: dict[str, str]) -> list[Finding]:
    """The cross-node group check contract (analysis/contract.GroupCheck)."""
    return check(group, failed, _without_vllm(group, facts, failed))


def _without_vllm(group: RankGroup, facts: dict[str, Facts], failed: dict[str, str]) -> list[str]:
    """Swept nodes outside the group that answered and run no vLLM deployment (looked at only when the
    group misses a node-rank and no node failed to answer: the unanswered node explains it first)."""
    if failed or len({m.node_rank for m in group.members if m.node_rank is not None}) >= group.nnodes:
        return []
    return sorted(name for name, node in facts.items()
                  if name not in group.nodes and node.snapshot.status("processes") == "ok" and not node.all_deployments)
