"""A multi-node Ray group hung the same way on every node (pure).

From the engine's node alone, ranks that all wait in one collective prove no uniform hang: the odd one
out may run on another node (``shapes.ranks_on_other_nodes``), so that node says "suspected stall" (a
worker node alone cannot even tell work is in flight). Once the sweep has the whole group, no rank is odd
across the nodes, every rank of it is at the same point, and the engine's node saw its ranks not move
(``gpu.stall_suspected`` held over its window): the collective all ranks entered never completes, a uniform
hang (real-hang-patterns row 3: a wedged NCCL kernel, custom all-reduce, P2P/ACS).
"""

from __future__ import annotations

from vllmdiag.analysis.across_nodes.rank_groups import RankGroup
from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.views.rank_compare import fold, tp_groups
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.model import Culprit, Finding
from vllmdiag.vocab.stack_classes import COLLECTIVE, SYNC_POINT

CODE = "fleet.uniform_hang"
CODES = (CODE,)
SUSPECTED = "gpu.stall_suspected"


def uniform_across_nodes(group: RankGroup, facts: dict[str, Facts],
                         findings: dict[str, list[Finding]]) -> Finding | None:
    head = group.members[0]
    held = [f for f in findings.get(head.node, []) if f.code == SUSPECTED and f.deployment == head.deployment.id
            and f.needs_confirm is False]
    if not held:
        return None  # the engine's node saw its work move, or did not look long enough
    seen: dict[int, tuple[str, StackClass]] = {}
    for m in group.members:
        classes = facts[m.node].classes
        for members in tp_groups(m.deployment.processes).values():
            for rank, proc in members.items():
                if proc["pid"] in classes:
                    seen[rank] = (m.node, classes[proc["pid"]])
    size = (head.deployment.configured.get("tp") or 0) * (head.deployment.configured.get("pp") or 1)
    labels = {sc.label for _, sc in seen.values()}
    if size < 2 or sorted(seen) != list(range(size)) or len(labels) != 1:
        return None
    sc = next(iter(seen.values()))[1]
    if sc.name not in (COLLECTIVE, SYNC_POINT):
        return None
    ranks = fold([f"{node}:TP{r}" for r, (node, _) in sorted(seen.items())])
    what = sc.label.replace(f"{COLLECTIVE}:", "") + (f" ({sc.backend})" if sc.backend else "")
    window = min(f.window_s for f in held)
    msg = (f"Every rank of TP group {group.key} across {','.join(group.nodes)} ({ranks}) waits in the same {what} "
           f"at {sc.where}, and the engine's node saw nothing move for {window:.1f} s: a collective that every rank "
           "has entered and none leaves is a uniform hang (no rank is odd one out).")
    blame = Culprit(node=head.node, pid=None, role="rank_group", rank=None, title=f"TP group {group.key} ({ranks})",
                    reason=f"the whole multi-node group is stuck in {what}")
    return Finding(code=CODE, layer="gpu", severity="critical", node=group.members[0].node, message=msg,
                   pids=[], evidence={"group": group.key, "nodes": group.nodes, "class": sc.label, "ranks": ranks,
                                      "where": sc.where, "window_s": window},
                   deployment=group.members[0].deployment.id, culprits=[blame])
