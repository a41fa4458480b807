"""GPU layer across deployments: one data-parallel world run as several `vllm serve` (pure).

vLLM's external and hybrid load balancing start one `vllm serve` per DP rank (`--data-parallel-rank r`)
or per node (`--data-parallel-start-rank s --data-parallel-size-local n`); each has its own API server
and `VLLM::EngineCore_DP<r>`, and the ranks meet only in the per-step DP sync (torch.distributed over
`--data-parallel-address`, rendezvous from rank 0; vLLM 0.33 engine/arg_utils.py, entrypoints/cli/
serve.py, v1/engine/utils.py). No process tree joins them, so each reads as its own deployment and
gpu_groups (which compares DP ranks inside one deployment) never sees "DP0 in the DP all-reduce, DP1
idle". Here deployments are grouped by what their command lines say (same DP address, RPC port and
size, vLLM's own defaults filled in) and their ranks compared the same way. Ranks of the world that
are not on this node are named as not seen: never judged healthy, never blamed.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views.deployments import display_title, role_of
from vllmdiag.analysis.views.dp_worlds import World, dp_worlds, membership, split
from vllmdiag.analysis.views.parallel_ranks import RESTING, SYNC, dp_blame, dp_held, dp_ranks, stalled_deployments
from vllmdiag.analysis.views.rank_compare import fold, moving_deployments
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.model import Finding, Snapshot

LAYER = "gpu"
CODES = ("gpu.dp_world_out_of_step", "gpu.dp_world_unseen_ranks")


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    chosen = {d.id for d in deployments}
    if not any(membership(d) for d in deployments):
        return []  # no DP world member among them (the common case): no second deployment search
    worlds = dp_worlds(facts.all_deployments)
    if not worlds:
        return []
    classes, again = facts.classes, facts.again
    every = [m.dep for w in worlds for m in w.members]
    moving, stalled = moving_deployments(facts.progress_of(every)), stalled_deployments(facts.progress_of(every))
    out: list[Finding] = []
    for world in worlds:
        out += _judge(snapshot, world, classes, again, moving, stalled)
    return [f for f in out if f.deployment in chosen]


# ---- comparison ---------------------------------------------------------------------------------
def _judge(snap: Snapshot, world: World, classes: dict[int, StackClass], again: dict[int, StackClass],
           moving: set[str], stalled: dict[str, float]) -> list[Finding]:
    by_dp = dp_ranks([p for m in world.members for p in m.dep.processes])
    unseen = world.unseen(set(by_dp))
    in_sync, others = split(by_dp, classes)
    if in_sync and any(m.dep.id in moving for m in world.members):
        return []  # tokens came out while we looked: a sync in passing
    if in_sync and others and len(world.members) == 1:
        # One deployment holds every rank seen (hybrid LB, a node's share): gpu_groups compares them
        # (gpu.dp_out_of_step); here only what it cannot say, that other ranks were not looked at.
        in_sync = []
    elif in_sync and others:
        return _out_of_step(snap, world, by_dp, in_sync, others, unseen, classes, again, stalled)
    if in_sync and unseen:
        return _waits_for_unseen(snap, world, by_dp, in_sync, unseen, classes, stalled)
    if not unseen:
        return []
    msg = (f"{world.describe()}: rank(s) {_names(unseen)} are not on this node (or not running), so they were "
           f"not looked at and are not judged; rank(s) {_names(sorted(by_dp))} here were compared among themselves only.")
    return [finding("gpu.dp_world_unseen_ranks", LAYER, "info", snap, m.dep, msg, [], _evidence(world, by_dp, unseen), [])
            for m in world.members]


def _out_of_step(snap: Snapshot, world: World, by_dp: dict[int, list[dict[str, Any]]], in_sync: list[int],
                 others: dict[int, list[dict[str, Any]]], unseen: list[int], classes: dict[int, StackClass],
                 again: dict[int, StackClass], stalled: dict[str, float]) -> list[Finding]:
    waiter = _waiter(by_dp, in_sync, classes)
    blamed = {d: dp_blame(ps, classes) for d, ps in others.items()}
    confirmed = dp_held(waiter["pid"], others, again)
    if confirmed is False:
        return []  # the ranks moved on: a step in passing
    # Nothing moved in the world while work was in flight (its members' confirm window).
    window = max((stalled[m.dep.id] for m in world.members if m.dep.id in stalled), default=None)
    if any((c := classes.get(p["pid"])) is not None and c.name not in RESTING for p in blamed.values()):
        # A busy rank looked at twice 0.3 s apart may be a healthy MoE step's next layer (gpu_groups
        # _busy): only the progress window (nothing moved) names it.
        if not window:
            return []
        confirmed = None
    severity = "critical" if confirmed or window else "warning"
    culprits, parts = [], []
    for d, p in sorted(blamed.items()):
        owner = world.member_of(p["pid"])
        c = classes.get(p["pid"])
        what = f"{c.label} in {c.where}" if c else "no stack"
        where = f"deployment {owner.dep.id}" if owner else "?"
        parts.append(f"DP{d} ({where}, {display_title(p)} pid {p['pid']}) is not in it: {what}")
        culprits.append(culprit(snap, p, f"DP rank {d} out of step ({where}): DP{fold([str(x) for x in in_sync])} "
                                         f"wait in the DP sync all-reduce; this rank is {what}"))
    note = "" if confirmed else (f" (nothing moved for {window:.1f} s)" if window else " (one sample)")
    msg = (f"{world.describe()}, split over {len(world.members)} deployment(s): DP rank(s) {_names(in_sync)} wait "
           f"in the per-step DP sync ({classes[waiter['pid']].where}); " + "; ".join(parts) + "."
           + (f" Rank(s) {_names(unseen)} are not on this node: not looked at." if unseen else "") + note)
    ev = {**_evidence(world, by_dp, unseen), "in_sync": in_sync, "out_of_step": sorted(blamed), "waiter": waiter["pid"],
          "waiter_stack": classes[waiter["pid"]].key_frames, "confirmed_by_resample": bool(confirmed),
          "confirmed_by_progress": bool(window) and not confirmed}
    pids = [c.pid for c in culprits if c.pid]
    return [finding("gpu.dp_world_out_of_step", LAYER, severity, snap, m.dep, msg, pids, ev, culprits)
            for m in world.members]


def _waits_for_unseen(snap: Snapshot, world: World, by_dp: dict[int, list[dict[str, Any]]], in_sync: list[int],
                      unseen: list[int], classes: dict[int, StackClass], stalled: dict[str, float]) -> list[Finding]:
    """Every rank here is in the DP sync: the one it waits for is elsewhere. Never blames a rank it did
    not see, never critical: a warning (once nothing moved) that says where to look."""
    waiter = _waiter(by_dp, in_sync, classes)
    window = max((stalled[m.dep.id] for m in world.members if m.dep.id in stalled), default=None)
    msg = (f"{world.describe()}: DP rank(s) {_names(in_sync)} here wait in the per-step DP sync "
           f"({classes[waiter['pid']].where})" + (f", nothing moved for {window:.1f} s" if window else " (one sample)")
           + f"; the rank(s) they wait for, {_names(unseen)}, are not on this node: triage the node(s) running "
           f"them (vllmdiag sweep) to name the one out of step.")
    ev = {**_evidence(world, by_dp, unseen), "in_sync": in_sync, "waiter": waiter["pid"],
          "confirmed_by_progress": bool(window)}
    return [finding("gpu.dp_world_unseen_ranks", LAYER, "warning" if window else "info", snap, m.dep, msg,
                    [waiter["pid"]], ev, []) for m in world.members]


def _waiter(by_dp: dict[int, list[dict[str, Any]]], in_sync: list[int], classes: dict[int, StackClass]) -> dict[str, Any]:
    return next(p for d in in_sync for p in by_dp[d] if (c := classes.get(p["pid"])) and c.name in SYNC)


def _evidence(world: World, by_dp: dict[int, list[dict[str, Any]]], unseen: list[int]) -> dict[str, Any]:
    address, port, size = world.key
    members = [{"deployment": m.dep.id, "root_pid": m.dep.root_pid, "ranks": m.ranks, "mode": m.mode, "from": m.source,
                "engines": {str(d): p["pid"] for d, ps in by_dp.items() for p in ps
                            if role_of(p) == "engine_core" and p["pid"] in m.dep.pids}} for m in world.members]
    return {"dp_address": address, "dp_rpc_port": port, "dp_size": size, "members": members, "unseen_ranks": unseen}


def _names(ranks: list[int]) -> str:
    return fold([f"DP{r}" for r in ranks]) if ranks else "none"


# ---- for the orchestrator's second look (analysis/contract.py) ----------------------------------
def second_look_pids(facts: Facts) -> list[int]:
    """The analyzer contract's second-look hook (analysis/contract.py): the waiter and each out-of-step
    rank's blamed process of every DP world split over deployments."""
    classes, pids = facts.classes, []
    for world in dp_worlds(facts.deployments):
        by_dp = dp_ranks([p for m in world.members for p in m.dep.processes])
        in_sync, others = split(by_dp, classes)
        if in_sync and others:
            pids += [_waiter(by_dp, in_sync, classes)["pid"], *[dp_blame(ps, classes)["pid"] for ps in others.values()]]
    return sorted(set(pids))
