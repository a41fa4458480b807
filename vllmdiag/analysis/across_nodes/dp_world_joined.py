"""A data-parallel world whose ranks run on several nodes (external / hybrid load balancing), compared
across the nodes of a sweep (pure).

Alone, each node sees its own ranks and names the others unseen (``gpu.dp_world_unseen_ranks``): node
A's DP0 waits in the DP sync, node B's DP1 idles, and neither can name the culprit. Joined by what every
rank's command line says (``--data-parallel-address``, RPC port and size: vLLM needs a routable address
for ranks on other nodes, so a loopback address never joins nodes), the ranks are compared like one
node's (``analysis.gpu_dp_world``). Pids repeat across nodes, so members get fleet-wide ids.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views.deployments import Deployment, display_title
from vllmdiag.analysis.views.dp_worlds import Member, membership, split
from vllmdiag.analysis.views.parallel_ranks import RESTING, SYNC, dp_blame, dp_held, dp_ranks
from vllmdiag.analysis.views.rank_compare import fold
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.model import Finding, Snapshot

CODES = ("fleet.dp_world_out_of_step",)
REPLACED = ("gpu.dp_world_unseen_ranks",)  # a node's "not on this node" once the fleet saw every rank
LOOPBACK = ("127.", "localhost", "::1")


def cross_node(per_node: dict[str, list[Deployment]], facts: dict[str, Facts]
               ) -> tuple[list[Finding], set[tuple[str, str]]]:
    """(Findings of DP worlds split over nodes, the (node, deployment id) members whose ranks the fleet
    saw all of: their node-local unseen-ranks notes are answered)."""
    worlds: dict[tuple[str, int, int], list[tuple[str, Member]]] = {}
    for node, deps in per_node.items():
        for dep in deps:
            m = membership(dep)
            if m is not None and not m.address.startswith(LOOPBACK):
                worlds.setdefault(m.key, []).append((node, m))
    found: list[Finding] = []
    covered: set[tuple[str, str]] = set()
    for key, members in worlds.items():
        if len({node for node, _ in members}) < 2:
            continue
        findings, seen = _compare(key, members, facts)
        found += findings
        if seen >= set(range(key[2])):
            covered |= {(node, m.dep.id) for node, m in members}
    return found, covered


def _compare(key: tuple[str, int, int], members: list[tuple[str, Member]], facts: dict[str, Facts]
             ) -> tuple[list[Finding], set[int]]:
    procs: list[dict[str, Any]] = []
    classes: dict[int, StackClass] = {}
    again: dict[int, StackClass] = {}
    origin: dict[int, tuple[Snapshot, Member, dict[str, Any]]] = {}
    for node, m in members:
        snap, local, local_again = facts[node].snapshot, facts[node].classes, facts[node].again
        for p in m.dep.processes:
            uid = len(origin) + 1
            origin[uid] = (snap, m, p)
            procs.append({**p, "pid": uid})
            if p["pid"] in local:
                classes[uid] = local[p["pid"]]
            if p["pid"] in local_again:
                again[uid] = local_again[p["pid"]]
    by_dp = dp_ranks(procs)
    in_sync, others = split(by_dp, classes)
    if not (in_sync and others):
        return [], set(by_dp)
    waiter = next(p for d in in_sync for p in by_dp[d] if (c := classes.get(p["pid"])) and c.name in SYNC)
    held = dp_held(waiter["pid"], others, again)
    if held is False:
        return [], set(by_dp)
    if any((c := classes.get(dp_blame(ps, classes)["pid"])) is not None and c.name not in RESTING for ps in others.values()):
        held = None  # a busy rank twice may be a healthy step's next layer (gpu_groups._busy): a warning only
    parts, culprits = [], []
    for d, p in sorted((d, dp_blame(ps, classes)) for d, ps in others.items()):
        snap, m, real = origin[p["pid"]]
        c = classes.get(p["pid"])
        what = f"{c.label} in {c.where}" if c else "no stack"
        parts.append(f"DP{d} (node {snap.node}, {display_title(real)} pid {real['pid']}) is not in it: {what}")
        culprits.append(culprit(snap, real, f"DP rank {d} out of step on {snap.node}: DP{fold([str(x) for x in in_sync])} "
                                            f"wait in the DP sync all-reduce; this rank is {what}"))
    wsnap, _, wreal = origin[waiter["pid"]]
    msg = (f"DP world of size {key[2]} at {key[0]} (rpc port {key[1]}) over nodes "
           f"{fold(sorted({n for n, _ in members}))}: DP rank(s) {', '.join(f'DP{d}' for d in in_sync)} wait in the "
           f"per-step DP sync (on {wsnap.node}, pid {wreal['pid']}); " + "; ".join(parts) + "."
           + ("" if held else " (one sample)"))
    ev = {"dp_address": key[0], "dp_rpc_port": key[1], "dp_size": key[2], "in_sync": in_sync,
          "out_of_step": sorted(others), "confirmed_by_resample": bool(held),
          "members": [{"node": n, "deployment": m.dep.id, "ranks": m.ranks} for n, m in members]}
    out = []
    for node, m in members:
        snap = facts[node].snapshot
        mine = [c.pid for c in culprits if c.node == node and c.pid]
        out.append(finding("fleet.dp_world_out_of_step", "gpu", "critical" if held else "warning", snap, m.dep, msg,
                           mine, ev, culprits))
    return out, set(by_dp)
