"""Verdicts under partial data (issue 24 item 3), on snapshots of the real vLLM 0.33 code.

A probe's result is replaced by what the runner records when it times out or skips, in the quick
pass and every follow-up pass: work seen moving is healthy even without stacks, and the verdict says
which probe was missing; a probe that saw nothing never supports "idle"; blind on what the verdict
needs and nothing moved -> inconclusive with the fix.
"""

from __future__ import annotations

from test_progress import _snap, later

from vllmdiag.analysis.bisect import analyze
from vllmdiag.model import ProbeResult, Snapshot

STACKS_TIMEOUT = ProbeResult("timeout", 6.0, "no answer within 6.0 s")
SHM_TIMEOUT = ProbeResult("timeout", 3.0, "no answer within 3.0 s")
RINGS_SKIPPED = ProbeResult("skipped", 0.0, "the shm probe did not list /dev/shm, so there is no segment to decode")


def _without(snap: Snapshot, **results: ProbeResult) -> Snapshot:
    for s in (snap, *snap.passes):
        for name, res in results.items():
            s.probes[name] = ProbeResult(res.status, res.duration_s, res.reason)
    return snap


def _moving(tokens_before: float = 12901, tokens_after: float = 13772) -> Snapshot:
    snap = _snap("g")  # a request running, the engine waiting on its workers
    for server in snap.probes["http"].data["servers"]:
        for m in server["metrics"]:
            m["generation_tokens"] = tokens_before
    snap.passes = [later(snap, 0.5, tokens=tokens_after)]
    return snap


def _messages(report: object) -> str:
    return " ".join(f.message for f in report.findings)  # type: ignore[attr-defined]


def test_moving_deployment_with_stacks_timed_out_is_healthy_and_names_the_missing_probe() -> None:
    report = analyze([_without(_moving(), stacks=STACKS_TIMEOUT)])
    v = report.verdict
    assert v.status == "healthy", v.summary
    assert "generation tokens 12901 -> 13772" in v.summary
    assert "stacks timeout" in v.summary and any("stacks timeout" in e for e in v.evidence)


def test_same_deployment_not_moving_with_stacks_timed_out_is_inconclusive_with_the_fix() -> None:
    report = analyze([_without(_moving(13772, 13772), stacks=STACKS_TIMEOUT)])
    v = report.verdict
    assert v.status != "healthy", v.summary
    if v.status == "inconclusive":
        assert any("--budget" in s for s in v.next_steps)


def test_rings_missing_never_reads_idle() -> None:
    snap = _without(_snap("a"), shm=SHM_TIMEOUT, rings=RINGS_SKIPPED)
    report = analyze([snap])
    assert "Idle" not in _messages(report) and "drained" not in report.verdict.summary
    assert report.verdict.status == "inconclusive", report.verdict.summary
    assert "rings skipped" in report.verdict.summary and any("--budget" in s for s in report.verdict.next_steps)


def test_rings_and_stacks_missing_with_nothing_moving_is_inconclusive_with_the_fix() -> None:
    snap = _without(_snap("a"), stacks=STACKS_TIMEOUT, shm=SHM_TIMEOUT, rings=RINGS_SKIPPED)
    v = analyze([snap]).verdict
    assert v.status == "inconclusive" and "stacks timeout" in v.summary
    assert any("--budget" in s and "SCHED_FIFO" in s for s in v.next_steps)


def test_every_probe_answering_on_an_idle_deployment_is_still_idle() -> None:
    report = analyze([_snap("a")])
    assert report.verdict.status == "healthy" and "Idle" in report.verdict.summary
