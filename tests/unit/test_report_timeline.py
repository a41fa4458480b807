"""The node report's rank strip and timeline of the passes (issue 26), as analysis computes them into the
model (analysis/reporting.py): one cell per rank with its stack class and the culprit marked; per rank,
ring and /metrics counter, when it was looked at and when it last moved, in s since the first pass."""

from __future__ import annotations

import json

from judged import judged
from test_gpu_progress import ENGINE_WAITING, STEP, all_reduce, snapshot

from vllmdiag.model import ProbeResult, Report, Snapshot

EXECUTING = [(f, p, 10) for f, p in [*STEP, ("_prepare_inputs", "vllm/v1/worker/gpu_model_runner.py")]]


def _ring(flags: str, written: int) -> dict[str, object]:
    return {"name": "psm_rpc", "inode": 7, "mapped_by": [100, 101, 102, 103, 104], "geometry": {"max_chunks": 10,
            "max_chunk_bytes": 16 << 20, "n_reader": 4}, "sample_count": 2, "window_s": 0.1, "moved": False,
            "unread_slots": [0, 0, 0, 0], "samples": [{"t_s": 0.0, "written": written, "unread": [0] * 4, "flags": flags},
                                                       {"t_s": 0.1, "written": written, "unread": [0] * 4}]}


def _with_ring(snap: Snapshot, flags: str, written: int) -> Snapshot:
    snap.probes["rings"] = ProbeResult("ok", 0.1, None, {"rings": [_ring(flags, written)]})
    return snap


def test_a_straggler_strip_marks_the_culprit_and_the_timeline_says_nothing_moved() -> None:
    ranks = [all_reduce()] * 3 + [EXECUTING]
    rep = judged(snapshot(ranks, ENGINE_WAITING, 0), snapshot(ranks, ENGINE_WAITING, 1))
    dep = rep.deployments[0]
    assert [(c.label, c.stack_class, c.culprit) for c in dep.rank_strip] == [
        ("TP0", "collective:all_reduce", False), ("TP1", "collective:all_reduce", False),
        ("TP2", "collective:all_reduce", False), ("TP3", "executing", True)]
    tl = dep.timeline
    assert tl is not None and tl.passes == [0.0, 1.0] and tl.window_s == 1.5
    rows = {r.name: r for r in tl.rows}
    assert [r.name for r in tl.rows if r.kind == "rank"] == ["TP0", "TP1", "TP2", "TP3", "EngineCore"]
    assert rows["TP3"].looks == [0.0, 1.0] and rows["TP3"].moved == [] and rows["TP3"].last_moved_s is None
    assert rows["generation tokens"].looks == [0.1, 0.1, 1.1, 1.1] and not rows["generation tokens"].moved


def test_the_timeline_says_when_each_thing_last_moved() -> None:
    ranks = [all_reduce()] * 2
    moved_rank = [EXECUTING, all_reduce()]
    first = _with_ring(snapshot(ranks, ENGINE_WAITING, 0), "1111 0000", 1)
    later = _with_ring(snapshot(moved_rank, ENGINE_WAITING, 2, tokens=130), "1111 1111", 2)
    rep = judged(first, later)
    assert rep.verdict.status == "healthy", rep.verdict.summary
    rows = {r.name: r for r in rep.deployments[0].timeline.rows}  # type: ignore[union-attr]
    assert rows["TP0"].moved == [2.0] and rows["TP1"].moved == []
    assert rows["generation tokens"].last_moved_s == 2.1 and rows["prompt tokens"].moved == []
    ring = next(r for r in rows.values() if r.kind == "ring")
    assert ring.name == "psm_rpc (rpc_broadcast_mq)" and ring.looks == [0.0, 0.1, 2.0, 2.1] and ring.moved == [2.0]


def test_rank_strip_and_timeline_round_trip_and_older_reports_still_read() -> None:
    ranks = [all_reduce()] * 3 + [EXECUTING]
    rep = judged(snapshot(ranks, ENGINE_WAITING, 0), snapshot(ranks, ENGINE_WAITING, 1))
    raw = json.loads(json.dumps(rep.to_dict()))
    again = Report.from_dict(raw)
    assert again == rep and again.to_dict() == raw and again.deployments[0].rank_strip[3].culprit
    for dep in raw["deployments"]:  # written before the strip and the timeline
        del dep["rank_strip"], dep["timeline"]
    old = Report.from_dict(raw).deployments[0]
    assert old.rank_strip == [] and old.timeline is None


def test_the_terminal_says_the_timeline_in_one_line() -> None:
    from vllmdiag.render import report_data as rd
    from vllmdiag.render.compact import timeline

    first = _with_ring(snapshot([all_reduce()] * 2, ENGINE_WAITING, 0), "1111 0000", 1)
    later = _with_ring(snapshot([EXECUTING, all_reduce()], ENGINE_WAITING, 2, tokens=130), "1111 1111", 2)
    moving = rd.nodes(judged(first, later).to_dict())[0]
    assert timeline(moving) == ["[bold]timeline [/] 2 passes, looks from 0 to 2.10 s: last moved: generation tokens at "
                                "2.10 s, TP0 at 2.00 s, psm_rpc (rpc_broadcast_mq) at 2.00 s"]
    ranks = [all_reduce()] * 3 + [EXECUTING]
    still = rd.nodes(judged(snapshot(ranks, ENGINE_WAITING, 0), snapshot(ranks, ENGINE_WAITING, 1)).to_dict())[0]
    assert timeline(still)[0].endswith("nothing moved (ranks' stacks, /metrics counters)")
