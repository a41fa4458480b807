"""vllmdiag against fixtures captured from the REAL vLLM 0.33.0 code (tests/data/vllm-real/README.md).

Offline: saved `vllmdiag collect --json` snapshots, py-spy `--json` dumps and ring chunk bytes
written by vLLM's own MessageQueue / MultiprocExecutor / WorkerProc code. No vLLM needed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.views.deployments import find_deployments
from vllmdiag.analysis.views.ring_roles import ring_roles
from vllmdiag.analysis.views.stack_match import classify_snapshot, classify_threads
from vllmdiag.api import analyze_files, load_snapshots
from vllmdiag.probes import _ringfmt as rf
from vllmdiag.probes.stacks import parse_dump

DATA = Path(__file__).parent.parent / "data" / "vllm-real"
MiB = 1 << 20

# (file, status, layer, culprit (title, role, rank) or None)
VERDICTS = [
    ("snap-a-healthy.json", "healthy", None, None),
    ("snap-b-worker-tp2-stuck.json", "blocked", "queue", ("VLLM::Worker_TP2", "worker", 2)),
    ("snap-c-engine-not-reading.json", "blocked", "queue", ("VLLM::EngineCore", "engine_core", None)),
    ("snap-d-worker-tp1-sigstop.json", "blocked", "process", ("VLLM::Worker_TP1", "worker", 1)),
    ("snap-e-worker-tp3-zombie.json", "blocked", "process", ("VLLM::Worker_TP3", "worker", 3)),
    # Gone is said first (issue 33): no vLLM runs, then what the killed run left.
    ("snap-f-leaked-after-sigkill.json", "no-deployment", None, None),
]


def procs_by_title(path: Path) -> dict[str, dict[str, Any]]:
    snap = load_snapshots(path)[0]
    return {str(p.get("title")): p for p in snap.data("processes")["processes"]}


@pytest.mark.parametrize(("name", "status", "layer", "who"), VERDICTS)
def test_analyze_gives_the_expected_verdict(name: str, status: str, layer: str | None, who: tuple[Any, ...] | None) -> None:
    verdict = analyze_files([DATA / name]).report.verdict
    assert (verdict.status, verdict.layer) == (status, layer), verdict.summary
    if who is None:
        # healthy: nobody to blame; leaked segments: the segments themselves are the culprits
        assert all(c.role == "shm_segment" for c in verdict.culprits) and (status != "healthy" or not verdict.culprits)
        return
    top = verdict.culprits[0]
    assert (top.title, top.role, top.rank) == who, verdict.summary
    procs = procs_by_title(DATA / name)
    # A zombie has no cmdline, so no title: its title and rank come from the missing rank.
    expected = procs[who[0]] if who[0] in procs else next(p for p in procs.values() if p["state"] == "Z")
    assert top.pid == expected["pid"]


def test_b_finding_is_the_full_rpc_ring_blocked_on_reader_2() -> None:
    report = analyze_files([DATA / "snap-b-worker-tp2-stuck.json"]).report
    crit = [f for f in report.findings if f.severity == "critical"]
    assert [f.code for f in crit] == ["queue.ring_full"]
    ev = crit[0].evidence
    assert ev["role"] == "rpc_broadcast_mq" and ev["blocked_on"] == [2] and ev["stable_unread"] == [0, 0, 10, 0]
    assert ev["last_method"] == "execute_model"
    assert ev["writer_pid"] == procs_by_title(DATA / "snap-b-worker-tp2-stuck.json")["VLLM::EngineCore"]["pid"]


def test_c_finding_is_tp0s_response_ring_unread_by_the_engine() -> None:
    report = analyze_files([DATA / "snap-c-engine-not-reading.json"]).report
    crit = [f for f in report.findings if f.severity == "critical"]
    assert [f.code for f in crit] == ["queue.response_unread"]
    procs = procs_by_title(DATA / "snap-c-engine-not-reading.json")
    assert crit[0].evidence["writer_pid"] == procs["VLLM::Worker_TP0"]["pid"]
    assert crit[0].evidence["reader_pids"] == [procs["VLLM::EngineCore"]["pid"]]


def test_f_leak_finding_names_all_six_rings() -> None:
    report = analyze_files([DATA / "snap-f-leaked-after-sigkill.json"]).report
    leak = [f for f in report.findings if f.code == "queue.shm_leaked"]
    assert len(leak) == 1 and leak[0].severity == "warning" and leak[0].evidence["count"] == 6


@pytest.mark.parametrize("name", ["snap-a-healthy.json", "snap-b-worker-tp2-stuck.json", "snap-c-engine-not-reading.json",
                                  "snap-g-output-rank-stuck.json"])
def test_real_rings_decode_with_the_0_33_geometry_and_roles(name: str) -> None:
    snap = load_snapshots(DATA / name)[0]
    deps = find_deployments(snap)
    by_title = {str(p.get("title")): p["pid"] for p in snap.data("processes")["processes"]}
    tp = [by_title[f"VLLM::Worker_TP{i}"] for i in range(4)]
    engine = by_title["VLLM::EngineCore"]
    assert not snap.data("rings")["rejected"]
    seen = []
    for r in ring_roles(snap, deps):
        geo = r.ring["geometry"]
        assert r.ring["format"] in ("new", "unknown")  # nothing in the pre-0.12 layout
        writer = r.writer["pid"] if r.writer else None
        readers = [p["pid"] if p else None for p in r.readers]
        if r.role == "rpc_broadcast_mq":
            assert (geo, r.ring["size_bytes"]) == ({"max_chunks": 10, "max_chunk_bytes": 16 * MiB, "n_reader": 4}, 167_772_210)
            assert (writer, readers) == (engine, tp)
        elif r.role == "worker_response_mq":
            assert (geo, r.ring["size_bytes"]) == ({"max_chunks": 10, "max_chunk_bytes": 24 * MiB, "n_reader": 1}, 251_658_260)
            assert writer in tp and readers == [engine]
        else:
            assert r.role == "group_broadcaster"
            assert (geo, r.ring["size_bytes"]) == ({"max_chunks": 6, "max_chunk_bytes": 4 * MiB, "n_reader": 3}, 25_165_848)
            assert (writer, readers) == (tp[0], tp[1:])
        seen.append((r.role, writer))
    assert sorted(seen) == sorted([("group_broadcaster", tp[0]), ("rpc_broadcast_mq", engine)]
                                  + [("worker_response_mq", w) for w in tp])


def test_g_output_rank_stuck_stack_classes() -> None:
    """Recorded, not judged: the verdict of (g) is 'healthy' today (see README / lead's report)."""
    snap = load_snapshots(DATA / "snap-g-output-rank-stuck.json")[0]
    classes = classify_snapshot(snap)
    by_title = {str(p.get("title")): p["pid"] for p in snap.data("processes")["processes"]}
    assert classes[by_title["VLLM::EngineCore"]].name == "engine_waiting_workers"
    assert classes[by_title["VLLM::Worker_TP0"]].name == "executing"
    assert {classes[by_title[f"VLLM::Worker_TP{i}"]].name for i in (1, 2, 3)} == {"idle"}


@pytest.mark.parametrize(("name", "role", "cls", "thread"), [
    ("pyspy-worker-idle.json", "worker", "idle", "MainThread"),
    ("pyspy-engine-idle.json", "engine_core", "engine_idle", "MainThread"),
    ("pyspy-engine-acquire-write.json", "engine_core", "engine_blocked_full_ring", "MainThread"),
    ("pyspy-worker-blocked-nonvllm.json", "worker", "executing", "MainThread"),
    ("pyspy-worker-response-acquire-write.json", "worker", "writer_blocked_full_ring", "WorkerAsyncOutputCopy"),
    ("pyspy-engine-stuck-outside-waits.json", "engine_core", "engine_busy", "MainThread"),
    ("pyspy-engine-get-response.json", "engine_core", "engine_waiting_workers", "MainThread"),
])
def test_stack_classifier_on_real_dumps(name: str, role: str, cls: str, thread: str) -> None:
    sc = classify_threads(parse_dump((DATA / name).read_text()), role)
    assert (sc.name, sc.thread) == (cls, thread), sc.key_frames


def chunk(name: str) -> bytes:
    return bytes.fromhex(json.loads((DATA / "chunks.json").read_text())[name]["chunk_hex"])


def test_real_rpc_chunk_decodes() -> None:
    raw = chunk("rpc_execute_model")
    assert rf.head_format(raw[:rf.HEAD_BYTES]) == "new"
    assert rf.scan_chunk(raw, "new") == {"overflow": False, "method": "execute_model", "status": None}


@pytest.mark.parametrize("name", ["response_success", "response_failure"])
def test_real_response_chunk_is_new_format_without_a_method(name: str) -> None:
    raw = chunk(name)
    assert rf.head_format(raw[:rf.HEAD_BYTES]) == "new"
    assert rf.scan_chunk(raw, "new")["method"] is None


@pytest.mark.parametrize(("name", "status"), [("response_success", "SUCCESS"), ("response_failure", "FAILURE")])
def test_real_response_chunk_status(name: str, status: str) -> None:
    assert rf.scan_chunk(chunk(name), "new")["status"] == status


def test_f_a_killed_deployment_says_gone_first_then_lists_what_it_left() -> None:
    result = analyze_files([DATA / "snap-f-leaked-after-sigkill.json"])
    verdict = result.report.verdict
    assert result.exit_code == 3
    assert verdict.summary.startswith("No vLLM is running on "), verdict.summary
    assert "psm_" in verdict.summary and "leaked by a killed run" in verdict.summary
    assert verdict.next_steps, "the read-only next steps of the leftovers"
