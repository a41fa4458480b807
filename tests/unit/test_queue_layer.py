"""The pure tests of tests/live/test_queue_layer_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import io
from typing import Any

from vllmdiag.analysis.bisect import analyze
from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.layers.queue import ring_flow as queue
from vllmdiag.model import Finding, Snapshot
from vllmdiag.playbooks.playbook import load_playbooks

MiB = 1 << 20


def queue_findings(snap: Snapshot) -> list[Finding]:
    return queue.analyze(Facts.of(snap))


def only(findings: list[Finding], code: str) -> Finding:
    hits = [f for f in findings if f.code == code]
    assert len(hits) == 1, [(f.code, f.message) for f in findings]
    return hits[0]


def test_a_ring_unlinked_while_sampled_is_torn_down_not_leaked() -> None:
    unmapped = {"mapped_by": [], "stable_unread": [0, 0, 0, 0]}
    snap = synthetic(unmapped)
    snap.data("shm")["segments"][0]["mapped_by"] = []
    assert only(queue_findings(snap), "queue.shm_leaked").evidence["count"] == 1
    snap = synthetic(unmapped | {"unlinked": True})
    snap.data("shm")["segments"][0]["mapped_by"] = []
    assert queue_findings(snap) == []


def test_a_zero_byte_segment_is_being_created_not_leaked() -> None:
    snap = synthetic({"mapped_by": [], "stable_unread": [0, 0, 0, 0]})
    seg = snap.data("shm")["segments"][0]
    seg.update(mapped_by=[], size_bytes=0, allocated_bytes=0)  # shm_open done, ftruncate not yet
    assert [f for f in queue_findings(snap) if f.code == "queue.shm_leaked"] == []


# ---- saved-snapshot edits: the analysis is a pure function of the JSON -----------------------------
def synthetic(ring: dict[str, Any], free: int = 20 << 30) -> Snapshot:
    procs = [{"pid": 100, "ppid": 1, "pgid": 100, "role": "engine_core", "title": "VLLM::EngineCore", "titled": True,
              "ranks": {}, "state": "S"}]
    procs += [{"pid": 101 + r, "ppid": 100, "pgid": 100, "role": "worker", "title": f"VLLM::Worker_TP{r}",
               "titled": True, "ranks": {"tp": r}, "state": "S"} for r in range(4)]
    base = {"name": "psm_0badc0de", "path": "/dev/shm/psm_0badc0de", "size_bytes": 167772210,
            "allocated_bytes": 1 << 20, "mapped_by": [100, 101, 102, 103, 104], "mapped_by_other": [],
            "geometry": {"max_chunks": 10, "max_chunk_bytes": 16 * MiB, "n_reader": 4}, "sample_count": 3,
            "window_s": 0.2, "moved": False, "full": False, "blocked_on": [], "stable_unread": [0, 0, 0, 0],
            "unread_slots": [0, 0, 0, 0], "writer_index": 3, "last_method": "execute_model"}
    shm = {"roots": [{"dir": "/dev/shm", "usage": {"size_bytes": 24 << 30, "free_bytes": free}}],
           "segments": [{k: base[k] for k in ("name", "path", "size_bytes", "allocated_bytes", "mapped_by")}
                        | {"kind": "psm", "age_s": 30.0, "mapped_by_other": []}]}
    raw = {"schema_version": 1, "node": "n1", "probes": {
        "processes": {"status": "ok", "duration_s": 0.0, "data": {"processes": procs}},
        "shm": {"status": "ok", "duration_s": 0.0, "data": shm},
        "rings": {"status": "ok", "duration_s": 0.0, "data": {"rings": [base | ring], "rejected": []}}}}
    return Snapshot.from_dict(raw)


def test_unstable_or_single_sample_facts_never_block() -> None:
    lagging = {"stable_unread": [0, 3, 0, 0], "unread_slots": [0, 3, 0, 0]}
    assert only(queue_findings(synthetic(lagging)), "queue.reader_lagging").severity == "critical"
    assert queue_findings(synthetic(lagging | {"moved": True})) == []
    assert queue_findings(synthetic(lagging | {"sample_count": 1, "window_s": 0.0})) == []
    assert queue_findings(synthetic(lagging | {"stable_unread": [0, None, 0, 0]})) == []
    healthy_load = {"stable_unread": [1, 1, 2, 1], "moved": True}
    assert queue_findings(synthetic(healthy_load)) == []
    busy_step = {"stable_unread": [1, 1, 1, 1]}  # a long forward pass looks like this: info only
    assert [f.severity for f in queue_findings(synthetic(busy_step))] == ["info"]


def test_shm_space_findings() -> None:
    f = only(queue_findings(synthetic({}, free=100 * MiB)), "queue.shm_low")
    assert f.severity == "warning" and f.deployment is not None and f.evidence["need_bytes"] > f.evidence["free_bytes"]
    assert only(queue_findings(synthetic({}, free=100 * MiB)), "queue.shm_nearly_full").deployment is None
    assert queue_findings(synthetic({})) == []


def test_every_code_has_a_playbook_entry_with_read_only_confirm_steps() -> None:
    books = load_playbooks()
    for code in queue.CODES:
        assert code in books, code
        for cmd in books[code]["confirm"]:
            assert not any(w in cmd.split() for w in ("rm", "kill", "unlink", "truncate", ">")), cmd


def test_ring_view_highlights_the_laggard() -> None:
    from rich.console import Console

    from vllmdiag.render import queue_view

    report = analyze([synthetic({"full": True, "blocked_on": [2], "stable_unread": [0, 0, 10, 0],
                                 "unread_slots": [0, 0, 10, 0]})])
    console = Console(file=io.StringIO(), width=200, record=True, color_system=None)
    queue_view.render(report, console)
    text = console.export_text()
    assert "psm_0badc0de" in text and "TP2 10/10" in text and "FULL" in text
    # The node's section (analysis/sections.py) holds the ring as drawn, the blamed reader included.
    [section] = report.sections.values()
    ring = next(r for r in section.rings if r.name == "psm_0badc0de")
    assert ring.laggards == {2}
    bar = queue_view.bar(ring)
    red = [bar.plain[s.start:s.end] for s in bar.spans if "red" in str(s.style)]
    assert red == ["TP2 10/10"]
