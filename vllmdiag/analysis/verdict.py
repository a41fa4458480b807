"""Write a verdict a tired human can act on from the findings of the deciding layer (pure)."""

from __future__ import annotations

from vllmdiag.model import Culprit, Finding, Verdict
from vllmdiag.playbook import next_steps_for

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
    evidence += [f.message for f in all_findings if f not in ordered and f.severity != "info"][:6]
    steps: list[str] = []
    for f in ordered:
        for step in next_steps_for(f):
            if step not in steps:
                steps.append(step)
    return Verdict(status=status, layer=layer, culprits=culprits, summary=summary, evidence=evidence,
                   next_steps=steps[:8])


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
    """Follow the evidence into the later layers: a later blocking finding that blames the same
    process corroborates the verdict; one that blames another process lowers the confidence and
    is said out loud. Either way there is one verdict, never two contradicting ones."""
    blamed = {(c.node, c.pid) for c in verdict.culprits if c.pid is not None}
    agree: list[Finding] = []
    disagree: list[Finding] = []
    for f in later:
        theirs = {(c.node, c.pid) for c in f.culprits if c.pid is not None}
        if not theirs:
            continue
        (agree if theirs & blamed else disagree).append(f)
    for f in agree:
        verdict.evidence.append(f"corroborated by the {f.layer} layer: {f.message}")
    if disagree:
        verdict.confidence = "medium"
        for f in disagree:
            verdict.evidence.append(f"conflicting signal from the {f.layer} layer: {f.message}")
        verdict.summary += " Other layers point elsewhere too (see evidence): confidence medium."
    return verdict
