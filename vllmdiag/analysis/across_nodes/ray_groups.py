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

from vllmdiag.analysis.across_nodes.rank_groups import Member, RankGroup
from vllmdiag.analysis.views.deployments import Deployment

# Single-node findings that a joined group answers: the ranks the engine's node could not see were found.
ELSEWHERE_CODES = ("process.ranks_elsewhere", "process.engine_elsewhere", "process.workers_unseen")


def join(per_node: dict[str, list[Deployment]]) -> list[RankGroup]:
    """One group per Ray engine that workers on other nodes are connected to (or, when sockets could not
    be read, that runs the same Ray job of the same Ray cluster: ``RAY_JOB_ID`` of its local actors)."""
    owner: dict[tuple[str, str], tuple[str, Deployment]] = {}
    jobs: dict[tuple[str, str], list[tuple[str, Deployment]]] = {}
    for node, deps in per_node.items():
        for dep in deps:
            if dep.executor == "ray" and dep.kind != "ray_node":
                for link in dep.ray.get("remote_readers") or []:
                    owner[(link["remote"], link["local"])] = (node, dep)
                for job in dep.ray.get("jobs") or []:
                    jobs.setdefault((str(dep.ray.get("cluster")), job), []).append((node, dep))
    groups: dict[str, RankGroup] = {}
    for node, deps in sorted(per_node.items()):
        for dep in deps:
            if dep.kind != "ray_node":
                continue
            head, how = _engine_of(dep, node, owner, jobs)
            if head is None:
                continue
            head_node, head_dep = head
            key = f"ray:{head_dep.id}"
            group = groups.get(key)
            if group is None:
                group = groups[key] = RankGroup(key, [Member(head_node, head_dep, 0, None)])
            dep.ray["engine"] = {"node": head_node, "deployment": head_dep.id, "tied_by": how}
            group.members.append(Member(node, dep, len(group.members), None))
    for group in groups.values():
        for m in group.members:
            m.nnodes = len(group.members)
        _global_ranks(group)
    return sorted(groups.values(), key=lambda g: g.key)


def _engine_of(dep: Deployment, node: str, owner: dict[tuple[str, str], tuple[str, Deployment]],
               jobs: dict[tuple[str, str], list[tuple[str, Deployment]]]) -> tuple[tuple[str, Deployment] | None, str]:
    hits = [owner[(lk["local"], lk["remote"])] for links in (dep.ray.get("links") or {}).values()
            for lk in links if (lk["local"], lk["remote"]) in owner]
    head = _one(hits, node)
    if head is not None:
        return head, "TCP: its workers' connections to the engine's rpc queue"
    cluster = dep.ray.get("cluster")
    if cluster and len(dep.ray.get("jobs") or []) == 1:
        head = _one(jobs.get((str(cluster), dep.ray["jobs"][0]), []), node)
        if head is not None:
            return head, f"the same Ray job (RAY_JOB_ID {dep.ray['jobs'][0]}) of the same Ray cluster ({cluster})"
    return None, ""


def _one(hits: list[tuple[str, Deployment]], node: str) -> tuple[str, Deployment] | None:
    """The one engine on another node these workers are connected to (none, or several: no claim)."""
    found = [(n, d) for n, d in hits if n != node]
    return found[0] if len({d.id for _, d in found}) == 1 else None


def _global_ranks(group: RankGroup) -> None:
    """Renumber each worker node's Ray workers after the ranks of the nodes before it."""
    head = group.members[0].deployment
    offset = len(head.workers)
    tp, pp = head.configured.get("tp") or 0, head.configured.get("pp") or 1
    sure = len(group.members) == 2
    for m in group.members[1:]:
        workers = sorted(m.deployment.workers, key=lambda w: (int(w.get("ray_local_rank", 1 << 20)), w["pid"]))
        for local, w in enumerate(workers):
            rank = offset + local  # vLLM's global rank: pp * TP + tp (build_actor_name)
            w["ranks"] = {"tp": rank % tp, "pp": rank // tp} if pp > 1 and tp else {"tp": rank}
            w["name"] = "Worker" + "".join(f"_{k.upper()}{v}" for k, v in sorted(w["ranks"].items(), reverse=True))
            w["rank_source"] = ("after the engine node's ranks (Ray places the driver's node first)" if sure else
                                "unsure: Ray orders nodes after the driver's by node id, not seen here")
        offset += len(workers)
        m.deployment.ray["global_ranks"] = {"offset": offset - len(workers), "sure": sure}
