"""The live tests of tests/unit/test_shapes_pp_ep.py, which says what they check: these start something."""

from __future__ import annotations

import os

import pytest

# ---- the simulator's shapes, live (the accuracy matrix triages them; these check they are built like vLLM) ----
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the simulator's deployments run as root here")


@needs_root
def test_sim_pp_shape_titles_ranks_and_output_rank_like_vllm() -> None:
    from vllmdiag.analysis.views.deployments import find_deployments
    from vllmdiag.api import triage
    from vllmdiag_sim.deployment import Deployment

    with Deployment.up(tp=2, shape="pp") as dep:
        titles = {p["title"]: p["rank"] for p in dep.processes if p["role"] == "worker"}
        # rank = pp_rank * TP + tp_rank (TP fastest), titles as WorkerProc.setup_proc_title_and_log_prefix
        assert titles == {"VLLM::Worker_PP0_TP0": 0, "VLLM::Worker_PP0_TP1": 1, "VLLM::Worker_PP1_TP0": 2,
                          "VLLM::Worker_PP1_TP1": 3}
        snap = triage(pids=[dep.root_pid], budget_s=8, confirm_s=0).report.snapshots[0]
        [d] = [d for d in find_deployments(snap) if d.root_pid == dep.root_pid]
        assert d.configured.get("pp") == 2
        ours = {p["pid"] for p in dep.processes}  # other deployments may share the node's /dev/shm
        geo = [((r.get("geometry") or {}).get("n_reader"), (r.get("geometry") or {}).get("max_chunk_bytes"))
               for r in snap.data("rings").get("rings", []) if set(r.get("mapped_by") or []) <= ours]
        # the rpc ring (16 MiB) has every rank of both stages as readers; each stage has its own TP
        # broadcaster (4 MiB, TP-1 readers); one response ring (24 MiB) per worker
        assert geo.count((4, 16 << 20)) == 1 and geo.count((1, 4 << 20)) == 2 and geo.count((1, 24 << 20)) == 4, geo


@needs_root
def test_sim_ep_shape_titles_and_lockstep_waves_like_vllm() -> None:
    import urllib.request

    from vllmdiag_sim.deployment import Deployment

    with Deployment.up(tp=2, dp=2, fault="healthy-load", shape="ep") as dep:
        titles = sorted(p["title"] for p in dep.processes if p["role"] in ("worker", "engine_core"))
        assert titles == ["VLLM::EngineCore_DP0", "VLLM::EngineCore_DP1", "VLLM::Worker_DP0_TP0_EP0",
                          "VLLM::Worker_DP0_TP1_EP1", "VLLM::Worker_DP1_TP0_EP2", "VLLM::Worker_DP1_TP1_EP3"]

        def tokens() -> float:
            text = urllib.request.urlopen(f"http://127.0.0.1:{dep.http_port}/metrics", timeout=5).read().decode()
            return float(next(line.split()[-1] for line in text.splitlines()
                              if line.startswith("vllm:generation_tokens_total")))

        import time

        first = tokens()
        time.sleep(1.5)  # requests go round-robin to both DP ranks; every step needs all four EP ranks
        assert tokens() > first
