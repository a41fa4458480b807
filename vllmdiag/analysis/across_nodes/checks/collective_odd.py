"""Compare the stacks of a multi-node TP group across its nodes: the odd rank out, named by node (pure).

Alone, node B of a TP=4 group over two nodes sees TP2 waiting in all_reduce and TP3 elsewhere,
which is no majority; with node A's TP0 and TP1 also in all_reduce, TP3 is the straggler. The
single-node rules of ``analysis.gpu`` are reused on the union; pids repeat across nodes (each node
has its own PID namespace), so members are keyed by a fleet-wide id and mapped back for the culprit.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.across_nodes.rank_groups import RankGroup
from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit
from vllmdiag.analysis.views.rank_compare import GroupCompare, GroupKey, compare_group, fold, rank_name, tp_groups
from vllmdiag.analysis.views.second_look_classes import held
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.model import Finding, Snapshot

CODES = ("fleet.rank_straggler", "fleet.collective_mismatch")
_CODE = {"straggler": "fleet.rank_straggler", "mismatch": "fleet.collective_mismatch"}


def compare_across_nodes(group: RankGroup, facts: dict[str, Facts]) -> list[Finding]:
    union: dict[GroupKey, dict[int, dict[str, Any]]] = {}
    classes: dict[int, StackClass] = {}
    again: dict[int, StackClass] = {}
    origin: dict[int, tuple[Snapshot, dict[str, Any]]] = {}
    size = 0
    for m in group.members:
        node = facts[m.node]  # its stack classes, derived once for its own analyzers
        snap, local, local_again = node.snapshot, node.classes, node.again
        size = max(size, m.deployment.configured.get("tp", 0))
        for key, members in tp_groups(m.deployment.processes).items():
            for rank, proc in members.items():
                uid = len(origin) + 1
                origin[uid] = (snap, proc)
                union.setdefault(key, {})[rank] = {**proc, "pid": uid}
                if proc["pid"] in local:
                    classes[uid] = local[proc["pid"]]
                if proc["pid"] in local_again:
                    again[uid] = local_again[proc["pid"]]
    out = []
    for key, members in sorted(union.items()):
        cmp = compare_group(members, classes, size or None)
        if cmp is not None:
            f = _finding(group, key, members, cmp, classes, again, origin)
            if f is not None:
                out.append(f)
    return out


def _finding(group: RankGroup, key: GroupKey, members: dict[int, dict[str, Any]], cmp: GroupCompare,
             classes: dict[int, StackClass], again: dict[int, StackClass],
             origin: dict[int, tuple[Snapshot, dict[str, Any]]]) -> Finding | None:
    waiter = members[cmp.waiting[0]]
    peer_holds = held(waiter["pid"], classes[waiter["pid"]], again)
    odd = [o for o in cmp.odd if o.pid is not None and not (held(o.pid, o.cls, again) is False or peer_holds is False)]
    if not odd:
        return None  # missing ranks are the process layer's (groups.check); moving pictures are no hang
    confirmed = peer_holds is True and all(held(o.pid, o.cls, again) for o in odd)
    kind = next(k for k in ("mismatch", "straggler") if any(o.kind == k for o in odd))
    waiting = fold([f"{origin[members[r]['pid']][0].node}:TP{r}" for r in cmp.waiting])
    parts, culprits, pids = [], [], []
    for o in odd:
        snap, proc = origin[o.pid or 0]
        where = f"{o.cls.label} in {o.cls.where}" if o.cls else "?"
        desc = f"is in {o.cls.op if o.cls else '?'} instead" if o.kind == "mismatch" else f"never arrived: {where}"
        parts.append(f"{snap.node} {rank_name(proc)} (pid {proc['pid']}) {desc}")
        culprits.append(culprit(snap, proc, f"{o.kind}: peers on other nodes wait in {cmp.op or 'a collective'}; {desc}"))
        pids.append(int(proc["pid"]))
    head_snap = origin[odd[0].pid or 0][0]
    dep_id = next(m.deployment.id for m in group.members if m.node == head_snap.node)
    severity = "critical" if confirmed else "warning"
    msg = (f"TP group {group.key} across {','.join(group.nodes)}: {waiting} wait in {cmp.op or 'a collective'}; "
           + "; ".join(parts) + "." + ("" if confirmed else " (one sample)"))
    evidence: dict[str, Any] = {"group": group.key, "nodes": group.nodes, "op": cmp.op, "waiting": waiting,
                                "dp_pp_pcp": list(key), "confirmed_by_resample": confirmed,
                                "odd": [{"node": origin[o.pid or 0][0].node, "rank": o.rank, "kind": o.kind,
                                         "class": o.cls.label if o.cls else None} for o in odd]}
    return Finding(code=_CODE[kind], layer="gpu", severity=severity, node=head_snap.node, message=msg, pids=pids,
                   evidence=evidence, deployment=dep_id, culprits=culprits)


def check_group(group: RankGroup, facts: dict[str, Facts], failed: dict[str, str]) -> list[Finding]:
    """The cross-node group check contract (analysis/contract.GroupCheck)."""
    return compare_across_nodes(group, facts)
