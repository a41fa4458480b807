"""Multi-node Ray deployments joined across nodes (pure).

vLLM 0.33's RayExecutorV2 places ranks driver node first (``get_bundles_sorted_by_node``): the
EngineCore's node holds ranks 0..n-1; the other nodes run only Ray actors (no ``--nnodes``, no
``--master-addr`` on any command line), whose ranks on that node follow its GPUs in order. What ties
them is the rpc MessageQueue: each remote rank's SUB socket is connected to the engine's XPUB over TCP,
so the engine's accepted connection (local L, remote R) is that worker's connection (local R, remote L).
Pairing those 4-tuples across snapshots names the engine of every worker node, without trusting names.
Global ranks of a worker node: after the engine node's ranks. With more than two nodes Ray orders the
others by node id, which no snapshot shows: then ranks are marked as unsure.
"""

from __future__ import annotations

from vllmdiag.analysis.deployments import Deployment
from vllmdiag.analysis.fleet.groups import Member, RankGroup

ELSEWHERE_CODES = ("process.ranks_elsewhere", "process.engine_elsewhere")


def join(per_node: dict[str, list[Deployment]]) -> list[RankGroup]:
    """One group per Ray engine that workers on other nodes are connected to."""
    owner: dict[tuple[str, str], tuple[str, Deployment]] = {}
    for node, deps in per_node.items():
        for dep in deps:
            if dep.executor == "ray" and dep.kind != "ray_node":
                for link in dep.ray.get("remote_readers") or []:
                    owner[(link["remote"], link["local"])] = (node, dep)
    groups: dict[str, RankGroup] = {}
    for node, deps in sorted(per_node.items()):
        for dep in deps:
            if dep.kind != "ray_node":
                continue
            hits = [owner[(lk["local"], lk["remote"])] for links in (dep.ray.get("links") or {}).values()
                    for lk in links if (lk["local"], lk["remote"]) in owner]
            head = _one(hits, node)
            if head is None:
                continue
            head_node, head_dep = head
            key = f"ray:{head_dep.id}"
            group = groups.get(key)
            if group is None:
                group = groups[key] = RankGroup(key, [Member(head_node, head_dep, 0, None)])
            group.members.append(Member(node, dep, len(group.members), None))
    for group in groups.values():
        for m in group.members:
            m.nnodes = len(group.members)
        _global_ranks(group)
    return sorted(groups.values(), key=lambda g: g.key)


def _one(hits: list[tuple[str, Deployment]], node: str) -> tuple[str, Deployment] | None:
    """The one engine on another node these workers are connected to (none, or several: no claim)."""
    found = [(n, d) for n, d in hits if n != node]
    return found[0] if len({d.id for _, d in found}) == 1 else None


def _global_ranks(group: RankGroup) -> None:
    """Renumber each worker node's Ray workers after the ranks of the nodes before it."""
    offset = len(group.members[0].deployment.workers)
    sure = len(group.members) == 2
    for m in group.members[1:]:
        workers = sorted(m.deployment.workers, key=lambda w: (w.get("ranks") or {}).get("tp", 0))
        for w in workers:
            local = int((w.get("ranks") or {}).get("tp", 0))
            w["ranks"] = {"tp": offset + local}
            w["name"] = f"Worker_TP{offset + local}"
            w["rank_source"] = ("after the engine node's ranks (Ray places the driver's node first)" if sure else
                                "unsure: Ray orders nodes after the driver's by node id, not seen here")
        offset += len(workers)
        m.deployment.ray["global_ranks"] = {"offset": offset - len(workers), "sure": sure}
