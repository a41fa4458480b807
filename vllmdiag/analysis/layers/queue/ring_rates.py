"""--rates: how fast each ring moved over the observation window, and what stayed still (pure).

Ring flags hold no counter (vllm-internals 1.2), so the rate is a lower bound: slots whose flag
bytes changed between consecutive samples, per second. Reported only when the user asked for rates.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import finding
from vllmdiag.model import Finding

LAYER = "queue"
CODES = ("queue.ring_rates",)


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    if not snapshot.options.get("watch_s"):
        return []
    pids = {pid: dep for dep in deployments for pid in dep.pids}
    out = []
    for ring in snapshot.data("rings").get("rings", []):
        dep = next((pids[p] for p in ring.get("mapped_by", []) if p in pids), None)
        if dep is None:
            continue
        changed, window = slot_changes(ring.get("samples", [])), float(ring.get("window_s") or 0.0)
        rate = changed / window if window > 0 else 0.0
        still = changed == 0
        msg = (f"ring {ring.get('name')}: no slot changed in {window:.1f} s (stayed still)" if still else
               f"ring {ring.get('name')}: >= {rate:.1f} slot updates/s over {window:.1f} s")
        out.append(finding("queue.ring_rates", LAYER, "info", snapshot, dep, msg, list(ring.get("mapped_by", [])),
                           {"ring": ring.get("name"), "slot_updates": changed, "window_s": window,
                            "slot_updates_per_s": round(rate, 2), "still": still}, []))
    return out


def slot_changes(samples: list[dict[str, Any]]) -> int:
    """Slots whose flag bytes differ between consecutive recorded flag strings."""
    last: list[str] | None = None
    changed = 0
    for sample in samples:
        flags = sample.get("flags")
        if not isinstance(flags, str):
            continue
        slots = flags.split()
        if last is not None:
            changed += sum(1 for a, b in zip(last, slots, strict=False) if a != b)
        last = slots
    return changed
