"""Whether a P/D decode instance waits for its producer's KV (pure, never a finding): the queue layer's
kv_connector analyzer names it, and the client and gpu layers read it so they do not blame the local engine."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllmdiag.analysis.views import kv_transfer
from vllmdiag.analysis.views.deployments import Deployment
from vllmdiag.analysis.views.progress import metric_samples
from vllmdiag.vocab.stack_classes import ENGINE_YIELD, KV_TRANSFER

if TYPE_CHECKING:  # the snapshot's facts (analysis/facts.py, which derives from views: no import at run time)
    from vllmdiag.analysis.facts import Facts


def waits_for_kv(facts: Facts, dep: Deployment) -> bool:
    """A P/D decode instance waiting for its producer's KV: this layer names that, so the client and gpu
    layers do not blame the local engine for it."""
    return kv_wait(facts, dep) is not None


def kv_wait(facts: Facts, dep: Deployment) -> dict[str, Any] | None:
    """The KV-wait evidence of a consumer deployment over every pass (client.py asks it too), or None."""
    if not kv_transfer.is_consumer(dep):
        return None
    passes = facts.passes
    per_pass = [metric_samples(s, dep) for s in passes]
    samples = [m for ms in per_pass for m in ms]
    progress = facts.progress(dep)
    # The samples' own span: one pass's two /metrics reads, or the whole confirm window across passes.
    with_samples = [s for s, ms in zip(passes, per_pass, strict=True) if ms]
    gap = progress.window_s if len(with_samples) > 1 else \
        float(with_samples[0].data("http").get("sample_gap_s") or 0.0) if with_samples else 0.0
    wait = kv_transfer.waiting_for_kv(samples, gap, dep.kv_transfer.get("role"))
    if wait is None:
        return None
    classes = facts.classes
    polling = sorted(p["pid"] for p in dep.processes if (c := classes.get(p["pid"])) and c.name in (ENGINE_YIELD, KV_TRANSFER))
    return {**wait, "window_s": round(gap, 2), "moved": progress.moved_what[:4], "polling_pids": polling}
