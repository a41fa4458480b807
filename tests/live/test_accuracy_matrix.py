"""Accuracy matrix over DESIGN.md's fault catalog on the simulator, TP 2, 4 and 8 (TP 1 too for the progress faults).

Each fault must be named with the right layer and culprit; each healthy case must be healthy
(a false alarm is as bad as a miss). Every live verdict must also be reproduced by `analyze` of the
saved snapshot. The matrix prints at the end of the run (see conftest).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.api import analyze_files, triage
from vllmdiag.model import Culprit

sim = pytest.importorskip("vllmdiag_sim.deployment")
Deployment = sim.Deployment
EXPECTED = pytest.importorskip("vllmdiag_sim.faults").EXPECTED

TPS = (2, 4, 8)
# fault -> (status, layer, who): the simulator's catalog answer (vllmdiag_sim.faults.EXPECTED, which the
# demo grades against too). shm-small is a start fault of a namespaced node (tests/live/test_sim_namespace.py);
# api-killed and dp-out-of-step belong to deployment shapes (the shape rows below).
EXPECT: dict[str, tuple[str, str | None, str | None]] = {
    fault: answer for fault, answer in EXPECTED.items()
    if fault not in {"shm-small", "api-killed", "dp-out-of-step", "pp-stage-stuck", "ep-rank-odd", "kv-wait",
                     "dp-rank-held", "dp-idle-beside-load", "api-server-stopped"}}
# Faults whose TP sizes differ from TPS (TP=1 runs the model in the EngineCore: no group, no workers).
FAULT_TPS: dict[str, tuple[int, ...]] = {"uniform-collective": (2, 4, 8), "uniform-sync": (1, 2, 4, 8),
                                         "long-step": (1, 2, 4, 8), "healthy-slow": (1, 2, 4, 8), "compiling": (2, 4, 8),
                                         "init-odd-rank": (2, 4, 8),
                                         # structured output: the grammar thread lives in the EngineCore at any TP
                                         "grammar-stuck": (1, 2, 4), "grammar-load": (1, 2)}
CONFIRM_S = 5.0  # the confirm window of every case (from triage start): a stall must hold 3 s to be a block
RANKED = {"worker-killed", "worker-gone", "worker-stopped", "rpc-ring-full", "response-ring-full", "straggler",
          "collective-mismatch", "compiling", "init-odd-rank"}
CASES = [(fault, tp) for fault in EXPECT for tp in FAULT_TPS.get(fault, TPS)]
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root to read the simulator's stacks")


def _rank(fault: str, tp: int) -> int | None:
    return (tp - 1 if tp <= 2 else tp // 2) if fault in RANKED else None


def _blames(c: Culprit, who: str | None, dep: Any, fault: str, rank: int | None) -> bool:
    if who == "group":
        if dep.tp == 1:  # in-process LLM() (offline-inproc): the user's script is the EngineCore
            engine = dep.root_pid if dep.shape == "offline-inproc" else dep.engine_pid()
            return c.role == "engine_core" and c.pid == engine
        return c.role == "rank_group" and c.title == f"Worker_TP[0-{dep.tp - 1}]"
    if who == "worker":
        if fault == "response-ring-full":
            return False
        if fault == "init-odd-rank":  # still titled plain VLLM::Worker: the sim knows it by its missing rank
            untitled = [p["pid"] for p in dep.processes if p["role"] == "worker" and p.get("rank") is None]
            return c.role == "worker" and c.rank == rank and c.pid in untitled
        try:
            return c.role == "worker" and c.rank == rank and c.pid in (None, dep.worker_pid(rank))
        except sim.SimError:
            # The sim no longer lists a dead worker: the culprit must still not be a live peer.
            live = {p["pid"] for p in dep.processes if p["role"] == "worker"}
            return c.role == "worker" and c.rank == rank and c.pid not in live
    if who == "engine_core":
        return c.role == "engine_core"
    if who == "api_server":
        return c.role == "api_server" and c.pid == dep.root_pid
    if who == "client":
        clients = dep.pids_by_role.get("client", [])
        return c.pid in clients or c.role == "client"
    return who == "segments"


@needs_root
@pytest.mark.parametrize(("fault", "tp"), CASES)
def test_fault_is_named(fault: str, tp: int, tmp_path: Path, accuracy_matrix: Any, reliability: Any) -> None:
    status, layer, who = EXPECT[fault]
    rank = _rank(fault, tp)
    with Deployment.up(tp=tp, fault=fault, rank=rank) as dep:
        start = time.monotonic()
        result = triage(pids=[dep.root_pid], budget_s=8, confirm_s=CONFIRM_S)
        elapsed = time.monotonic() - start
        v = result.report.verdict
        snap_file = tmp_path / "snap.json"
        snap_file.write_text(json.dumps(result.report.snapshots[0].to_dict()))
        again = analyze_files([snap_file], [dep.root_pid]).report.verdict
        ok_status = v.status == status and v.layer == layer
        ok_culprit = who is None or any(_blames(c, who, dep, fault, rank) for c in v.culprits[:1])
        ok_offline = again.to_dict() == v.to_dict()
        accuracy_matrix.record(fault, tp, f"{v.status}/{v.layer or '-'}", ok_status and ok_culprit and ok_offline)
        reliability.case(hang=elapsed > 10 + CONFIRM_S)
        assert (v.status, v.layer) == (status, layer), f"{fault} TP={tp}: {v.summary}\n{v.evidence}"
        assert ok_culprit, f"{fault} TP={tp}: wrong culprit {[c.to_dict() for c in v.culprits]}\n{v.summary}"
        assert ok_offline, "analyze of the saved snapshot must reproduce the live verdict"


# ---- [shapes] deployment shapes beyond `vllm serve` + multiprocessing (issue 14) -----------------
# (shape, fault, tp, rank) -> (status, layer, who); "api_server_gone": the missing API server (no pid)
SHAPE_CASES: dict[tuple[str, str, int, int | None], tuple[str, str | None, str | None]] = {
    ("offline", "healthy", 2, None): ("healthy", None, None),
    ("offline", "straggler", 2, 1): ("blocked", "gpu", "worker"),
    ("offline-inproc", "healthy", 2, None): ("healthy", None, None),
    ("offline-inproc", "straggler", 4, 2): ("blocked", "gpu", "worker"),
    ("offline-inproc", "worker-stopped", 2, 0): ("blocked", "process", "worker"),
    # TP=1 in-process: no titled vLLM process at all, the model runs in the script (found by vLLM's kernels)
    ("offline-inproc", "healthy", 1, None): EXPECTED["healthy"],
    ("offline-inproc", "uniform-sync", 1, None): EXPECTED["uniform-sync"],
    # busy: every step waits at the same point, so only the script's own output (tqdm) shows it moving
    ("offline-inproc", "healthy-load", 1, None): EXPECTED["healthy-load"],
    ("ray", "healthy", 2, None): ("healthy", None, None),
    ("ray", "healthy-load", 2, None): ("healthy", None, None),
    ("ray", "straggler", 4, 1): ("blocked", "gpu", "worker"),
    ("ray", "collective-mismatch", 2, 1): ("blocked", "gpu", "worker"),
    ("ray", "worker-stopped", 2, 1): ("blocked", "process", "worker"),
    ("ray", "rpc-ring-full", 2, 1): ("blocked", "queue", "worker"),
    ("ray", "api-killed", 2, None): ("blocked", "process", "api_server_gone"),
    ("serve", "api-killed", 2, None): ("blocked", "process", "api_server_gone"),
    # DP=2 x TP=2 with a DPCoordinator; rank = the DP rank that never joins the DP sync
    ("dp", "healthy", 2, None): ("healthy", None, None),
    ("dp", "healthy-load", 2, None): ("healthy", None, None),
    ("dp", "dp-out-of-step", 2, 1): ("blocked", "gpu", "dp_engine"),
    ("dp", "straggler", 2, 1): ("blocked", "gpu", "worker"),
    ("dp", "api-killed", 2, None): ("blocked", "process", "api_server_gone"),
    # MoE DP: DP1 held in its forward, DP0 waits for it in the MoE dispatch all-gather: DP1's worker is named
    ("dp", "dp-rank-held", 1, 1): EXPECTED["dp-rank-held"],
    # a container-like node (own PID+mount namespace, a Python init that adopts orphans)
    ("ns", "healthy", 2, None): ("healthy", None, None),
    ("ns", "straggler", 2, 1): ("blocked", "gpu", "worker"),
    ("ns", "api-killed", 2, None): ("blocked", "process", "api_server_gone"),
    # PP=2 x TP: rank = the stage that wedges (pp-stage-stuck), the global rank p * TP + t (straggler)
    ("pp", "healthy", 2, None): ("healthy", None, None),
    ("pp", "healthy-load", 2, None): ("healthy", None, None),
    ("pp", "pp-stage-stuck", 2, 0): ("blocked", "gpu", "pp_stage"),
    ("pp", "straggler", 2, 1): ("blocked", "gpu", "worker"),
    # a straggler in the last stage: stage 0 sent and went idle, nothing to pin on it
    ("pp", "straggler", 2, 3): ("blocked", "gpu", "rank_pid"),
    ("pp", "worker-stopped", 2, 1): ("blocked", "process", "rank_pid"),
    # external DP load balancing: two `vllm serve --data-parallel-rank r` (own API server and EngineCore_DP<r>
    # each) meeting only in the DP sync; rank = the DP rank that never joins it
    ("dp-external", "healthy", 2, None): ("healthy", None, None),
    ("dp-external", "healthy-load", 2, None): ("healthy", None, None),
    ("dp-external", "dp-out-of-step", 2, 1): ("blocked", "gpu", "dp_engine"),
    # DP=2 x TP with --enable-expert-parallel (DeepEP high-throughput); rank = the EP rank (dp * TP + tp)
    ("ep", "healthy", 2, None): ("healthy", None, None),
    ("ep", "healthy-load", 2, None): ("healthy", None, None),
    ("ep", "healthy-load", 1, None): ("healthy", None, None),
    ("ep", "ep-rank-odd", 2, 3): ("blocked", "gpu", "ep_worker"),
    ("ep", "ep-rank-odd", 1, 0): ("blocked", "gpu", "ep_worker"),
    # [pd] the decode instance of a P/D pair (NixlConnector kv_consumer): its KV never comes from the prefill
    # side, which is another deployment: degraded, the producer named, never the local engine
    ("pd", "healthy", 1, None): ("healthy", None, None),
    ("pd", "healthy-load", 2, None): ("healthy", None, None),
    ("pd", "kv-wait", 1, None): EXPECTED["kv-wait"],
    ("pd", "kv-wait", 2, None): EXPECTED["kv-wait"],
    # [dense-dp] `vllm serve --dp 2` of a dense model (shape serve): a manager, independent EngineCore_DPn each
    # with a plain VLLM::Worker, APIServer_0/1; rank = the DP rank (held, or loaded beside an idle one)
    ("dense-dp", "healthy", 1, None): ("healthy", None, None),
    ("dense-dp", "healthy-load", 1, None): ("healthy", None, None),
    ("dense-dp", "dp-idle-beside-load", 1, 0): EXPECTED["dp-idle-beside-load"],
    ("dense-dp", "dp-rank-held", 1, 1): EXPECTED["dp-rank-held"],
    ("dense-dp", "dp-rank-held", 1, 0): EXPECTED["dp-rank-held"],
    # APIServer_1 stopped beside a serving APIServer_0 (one shared socket): named, as on the real server
    ("dense-dp", "api-server-stopped", 1, 1): EXPECTED["api-server-stopped"],
}
DP_SHAPES = ("dp", "dp-external", "dense-dp")


def _roots(dep: Any) -> list[int]:
    """What an operator points triage at: the API server, or each rank's for external DP."""
    if dep.shape == "dp-external":
        return sorted(p["pid"] for p in dep.processes if p["role"] == "api_server")
    return [dep.root_pid]


def _blames_stage(c: Culprit, dep: Any, stage: int) -> bool:
    """The stuck PP stage as a whole (every rank of it at one point), or one of its ranks."""
    ranks = [stage * dep.tp + t for t in range(dep.tp)]
    if c.role == "rank_group":
        return c.title == f"Worker_PP{stage}_TP[0-{dep.tp - 1}]"
    return c.role == "worker" and c.pid in [dep.worker_pid(r) for r in ranks]


@needs_root
@pytest.mark.parametrize("case", list(SHAPE_CASES), ids=lambda c: f"{c[0]}-{c[1]}-tp{c[2]}")
def test_shape_is_named(case: tuple[str, str, int, int | None], tmp_path: Path, accuracy_matrix: Any) -> None:
    shape, fault, tp, rank = case
    status, layer, who = SHAPE_CASES[case]
    with Deployment.up(tp=tp, dp=2 if shape in (*DP_SHAPES, "ep") else 1, fault=fault, rank=rank,
                       shape="serve" if shape == "dense-dp" else shape, namespace=shape == "ns") as dep:
        result = triage(pids=_roots(dep), budget_s=8, confirm_s=CONFIRM_S)
        v = result.report.verdict
        snap_file = tmp_path / "snap.json"
        snap_file.write_text(json.dumps(result.report.snapshots[0].to_dict()))
        again = analyze_files([snap_file], _roots(dep)).report.verdict
        first = v.culprits[:1]
        if who == "api_server_gone":
            ok_culprit = bool(first) and first[0].role == "api_server" and first[0].pid is None
        elif who == "ep_worker":  # the worker titled ..._EP{rank}, whichever DP rank it is on
            ok_culprit = bool(first) and first[0].role == "worker" and first[0].title.endswith(f"_EP{rank}") and any(
                p["pid"] == first[0].pid and p["title"].endswith(f"_EP{rank}") for p in dep.processes)
        elif who == "rank_pid":  # the worker of the sim's global rank (PP: pp * TP + tp), by pid
            ok_culprit = bool(first) and first[0].role == "worker" and first[0].pid == dep.worker_pid(rank or 0)
        elif who == "pp_stage":
            ok_culprit = bool(first) and _blames_stage(first[0], dep, rank or 0)
        elif who == "kv_producer":  # no local process at all: the producer is another deployment
            ok_culprit = bool(first) and first[0].role == "kv_producer" and first[0].pid is None and not any(
                c.role in ("engine_core", "worker") for c in v.culprits)
        elif who == "api_server_child":  # VLLM::APIServer_<rank>, by pid
            ok_culprit = bool(first) and first[0].role == "api_server_child" and first[0].pid in [
                p["pid"] for p in dep.processes if p["role"] == "api_server_child" and p.get("rank") == rank]
        elif who == "dp_worker":  # the held DP rank's worker, known by its parent EngineCore_DP<rank>
            ok_culprit = bool(first) and first[0].role == "worker" and first[0].pid in [
                p["pid"] for p in dep.processes if p["role"] == "worker" and p.get("dp_rank") == rank]
        elif who == "dp_engine":
            ok_culprit = bool(first) and first[0].role == "engine_core" and first[0].pid == dep.engine_pid(dp_rank=rank or 0)
        else:
            ok_culprit = who is None or any(_blames(c, who, dep, fault, rank) for c in first)
        ok = (v.status, v.layer) == (status, layer) and ok_culprit and again.to_dict() == v.to_dict()
        accuracy_matrix.record(f"{shape}:{fault}", tp, f"{v.status}/{v.layer or '-'}", ok)
        assert (v.status, v.layer) == (status, layer), f"{shape} {fault} TP={tp}: {v.summary}\n{v.evidence}"
        assert ok_culprit, f"{shape} {fault}: wrong culprit {[c.to_dict() for c in v.culprits]}"
        assert again.to_dict() == v.to_dict(), "analyze of the saved snapshot must reproduce the live verdict"
