"""Write a verdict a tired human can act on from the findings of the deciding layer (pure)."""

from __future__ import annotations

from vllmdiag.model import Culprit, Finding, Verdict
from vllmdiag.playbooks.playbook import next_steps_for

COMPUTE_ROLES = ("engine_core", "worker")
SEVERITY_RANK = {"critical": 2, "warning": 1, "info": 0}


def write_verdict(status: str, layer: str | None, deciding: list[Finding], all_findings: list[Finding]) -> Verdict:
    ordered = sorted(deciding, key=lambda f: -SEVERITY_RANK.get(f.severity, 0))
    culprits = _dedupe([c for f in ordered for c in f.culprits])
    head = ordered[0]
    who = _who(culprits)
    if status == "blocked":
        summary = f"Blocked at the {layer} layer: {head.message}"
        if who and who not in head.message:
            summary += f" Culprit: {who}."
    else:
        summary = f"Degraded ({layer}): {head.message}"
    evidence = [f.message for f in ordered]
    # Other blocking findings are added by corroborate() with their relation; warnings here.
    evidence += [_as_seen(f, status) for f in all_findings if f not in ordered and f.severity == "warning"][:6]
    steps: list[str] = []
    for f in ordered:
        for step in next_steps_for(f):
            if step not in steps:
                steps.append(step)
    return Verdict(status=status, layer=layer, culprits=culprits, summary=summary, evidence=evidence,
                   next_steps=steps[:8])


def _as_seen(f: Finding, status: str) -> str:
    """Under a blocked verdict a suspicion (gpu.stall_suspected) says what it saw (``observed``),
    not its doubt: "seen for only 0.4 s" under a confident straggler read as if the block were in question."""
    return f.observed if status == "blocked" and f.observed else f.message


def _who(culprits: list[Culprit]) -> str:
    if not culprits:
        return ""
    c = culprits[0]
    pid = f"pid {c.pid}" if c.pid else "no pid"
    return f"{c.title or c.role} ({pid})"


def _dedupe(culprits: list[Culprit]) -> list[Culprit]:
    seen = set()
    out = []
    for c in culprits:
        key = (c.node, c.pid, c.role, c.rank)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


def corroborate(verdict: Verdict, later: list[Finding]) -> Verdict:
    """Follow the evidence into the later layers. When the flow stops upstream, downstream layers
    stall too (requests wait, rings stop moving): those are symptoms and are listed as such. A later
    finding that blames the same process corroborates the verdict; one that blames another process
    on the compute path (EngineCore, worker) lowers the confidence and is said out loud. Either way
    there is one verdict, never two contradicting ones."""
    blamed = {(c.node, c.pid) for c in verdict.culprits if c.pid is not None}
    for f in later:
        theirs = {(c.node, c.pid) for c in f.culprits if c.pid is not None}
        compute = {(c.node, c.pid) for c in f.culprits if c.pid is not None and c.role in COMPUTE_ROLES}
        if theirs & blamed:
            verdict.evidence.append(f"corroborated by the {f.layer} layer: {f.message}")
        elif compute and blamed and not compute & blamed:
            verdict.confidence = "medium"
            verdict.evidence.append(f"conflicting signal from the {f.layer} layer: {f.message}")
        else:
            verdict.evidence.append(f"downstream symptom ({f.layer}): {f.message}")
    if verdict.confidence == "medium":
        verdict.summary += " Another layer blames a different process (see evidence): confidence medium."
    return verdict
