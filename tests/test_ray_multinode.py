"""Multi-node Ray (vLLM 0.33 RayExecutorV2): `vllm serve --distributed-executor-backend ray` with TP=4 over
a two-node Ray cluster. Node A (gpu00) runs the API server, the EngineCore and ranks 0-1; node B (gpu01)
only a raylet whose actors hold ranks 2-3 and read the engine's rpc queue over TCP. Each node is a real
PID+mount namespace swept through ClusterShell's exec worker with nsenter; the saved sweep is analysed
again offline. Seen alone, neither node reads healthy and nothing is blamed on it; swept together, the
workers on B are tied to A's engine by their TCP connections and the whole group is compared."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from fleet_fixtures import ns_init_pid, skip_reason
from sim_fixtures import two_node_ray

sim = pytest.importorskip("vllmdiag_sim.deployment")


def on_sim_nodes(test: Any) -> Any:
    """Root, slow: the tests that run the two-node Ray cluster in namespaces."""
    for mark in (pytest.mark.root, pytest.mark.slow,
                 pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")):
        test = mark(test)
    return test


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    proc = subprocess.run([sys.executable, "-m", "vllmdiag", *args, "--json"], capture_output=True, text=True,
                          timeout=150)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture(scope="module", params=["healthy", "straggler", "uniform-collective"])
def swept(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp(f"ray-{request.param}")
    # A uniform hang is only called after the engine's node watched its ranks not move (sweep --confirm).
    confirm = ["--confirm", "5"] if request.param == "uniform-collective" else []
    with two_node_ray(tmp, request.param, None if request.param == "healthy" else 3) as deps:
        for name, dep in zip(("gpu00", "gpu01"), deps, strict=True):
            (tmp / name).symlink_to(f"/proc/{ns_init_pid(dep.launcher_pid)}")
        rc, out = run_json("sweep", "gpu00,gpu01", "--exec", f"nsenter --pid={tmp}/%h/ns/pid --mount={tmp}/%h/ns/mnt --",
                           "--remote-cmd", f"{sys.executable} -m vllmdiag", "--save", str(tmp / "saved"), *confirm)
    yield {"fault": request.param, "rc": rc, "out": out, "saved": tmp / "saved"}


@on_sim_nodes
def test_sweep_ties_node_b_workers_to_the_engine_and_judges_the_whole_group(swept: dict[str, Any]) -> None:
    out, v = swept["out"], swept["out"]["verdict"]
    assert [n["status"] for n in out["nodes"]] == ["ok", "ok"], out["nodes"]
    assert [g["nodes"] for g in out["fleet"]["groups"]] == [["gpu00", "gpu01"]], out["fleet"]["groups"]
    ranks = {(d["node"], p["ranks"].get("tp")) for d in out["deployments"] for p in d["processes"] if p["role"] == "worker"}
    assert ranks == {("gpu00", 0), ("gpu00", 1), ("gpu01", 2), ("gpu01", 3)}, ranks
    if swept["fault"] == "healthy":
        assert (swept["rc"], v["status"]) == (0, "healthy"), v["summary"]
        return
    assert (swept["rc"], v["status"], v["layer"]) == (1, "blocked", "gpu"), v["summary"]
    if swept["fault"] == "uniform-collective":  # every rank on both nodes in one all_reduce: the whole group
        assert {f["node"] for f in out["findings"] if f["code"] == "fleet.uniform_hang"} == {"gpu00", "gpu01"}
        assert [n["verdict"] for n in out["nodes"]] == ["blocked", "blocked"]
        assert {c["rank"] for c in v["culprits"]} == {None} and "gpu01:TP[2-3]" in v["summary"], v["summary"]
        return
    assert [(c["node"], c["rank"]) for c in v["culprits"]] == [("gpu01", 3)], v["culprits"]
    odd = [f for f in out["findings"] if f["code"] == "fleet.rank_straggler"]
    assert odd and odd[0]["evidence"]["waiting"] == "gpu00:TP[0-1],gpu01:TP2", odd
    assert not [f for f in out["findings"] if f["severity"] != "info" and f["node"] == "gpu00"]


@on_sim_nodes
def test_saved_sweep_gives_the_same_verdict(swept: dict[str, Any]) -> None:
    rc, again = run_json("analyze", str(swept["saved"]))
    v, first = again["verdict"], swept["out"]["verdict"]
    assert (rc, v["status"], v["layer"]) == (swept["rc"], first["status"], first["layer"]), v["summary"]
    assert [(c["node"], c["rank"]) for c in v["culprits"]] == [(c["node"], c["rank"]) for c in first["culprits"]]


@on_sim_nodes
def test_node_b_alone_says_the_engine_is_elsewhere_and_blames_no_rank_by_a_wrong_number(swept: dict[str, Any]) -> None:
    rc, out = run_json("analyze", str(swept["saved"] / "gpu01.json"))
    v = out["verdict"]
    assert v["status"] != "healthy" and rc != 0, v["summary"]
    elsewhere = [f for f in out["findings"] if f["code"] == "process.engine_elsewhere"]
    assert elsewhere and "another node" in elsewhere[0]["message"] and "sweep" in elsewhere[0]["message"]
    # Alone, a worker node knows only the order of its ranks, not their numbers: none is made up.
    assert all(c["rank"] is None for c in v["culprits"]), v["culprits"]
    assert not [p for d in out["deployments"] for p in d["processes"] if p["role"] == "worker" and p["ranks"]]
    if swept["fault"] == "healthy":
        assert v["status"] == "inconclusive" and not v["culprits"], v["summary"]


@on_sim_nodes
def test_node_a_alone_says_ranks_run_elsewhere_never_healthy_or_missing(swept: dict[str, Any]) -> None:
    rc, out = run_json("analyze", str(swept["saved"] / "gpu00.json"))
    v = out["verdict"]
    assert v["status"] != "healthy" and rc != 0, v["summary"]
    assert not [f for f in out["findings"] if f["code"] == "process.rank_missing"]
    elsewhere = [f for f in out["findings"] if f["code"] == "process.ranks_elsewhere"]
    assert elsewhere and elsewhere[0]["evidence"]["world"] == 4 and elsewhere[0]["evidence"]["local_ranks"] == 2
    assert not v["culprits"], v["culprits"]  # its ranks wait for one elsewhere: no uniform hang is claimed
    if swept["fault"] == "healthy":
        assert v["status"] == "inconclusive" and "other node" in v["summary"], v["summary"]
    else:
        assert v["status"] == "degraded" and "other nodes" in v["summary"], v["summary"]


def _without_sockets(saved: Any, jobs: dict[str, str]) -> list[Any]:
    """The saved snapshots as a node would send them with its sockets unreadable, each Ray actor carrying
    the ``RAY_JOB_ID`` its raylet gives it (the sim forks actors, so their environ lacks it)."""
    from vllmdiag.model import Snapshot

    out = []
    for node, job in jobs.items():
        data = json.loads((saved / f"{node}.json").read_text())
        data["probes"]["sockets"] = {"status": "error", "duration_s": 0.0, "reason": "permission denied", "data": {}}
        for p in data["probes"]["processes"]["data"]["processes"]:
            if p.get("executor") == "ray":
                p.setdefault("environ", {})["RAY_JOB_ID"] = job
        out.append(Snapshot.from_dict(data))
    return out


@on_sim_nodes
def test_without_sockets_the_ray_job_of_one_cluster_ties_them_and_another_job_does_not(swept: dict[str, Any]) -> None:
    from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet

    same = analyze_fleet(_without_sockets(swept["saved"], {"gpu00": "01000000", "gpu01": "01000000"}))
    assert [g.nodes for g in same.fleet.groups] == [["gpu00", "gpu01"]] if same.fleet else False
    if swept["fault"] == "straggler":
        assert [(c.node, c.rank) for c in same.verdict.culprits] == [("gpu01", 3)], same.verdict.summary
    other = analyze_fleet(_without_sockets(swept["saved"], {"gpu00": "01000000", "gpu01": "02000000"}))
    assert other.fleet is not None and other.fleet.groups == []  # another driver's job: not this engine's workers
    assert other.verdict.status != "healthy", other.verdict.summary


# ---- without the simulator: the same ties from synthetic snapshots (what real vLLM 0.33 leaves in /proc) ----
SHM = "vllm/distributed/device_communicators/shm_broadcast.py"
REMOTE_IDLE = [{"name": "MainThread", "frames": [["poll", "zmq/sugar/poll.py", 1], ["recv", SHM, 1], ["dequeue", SHM, 1],
                                                 ["worker_busy_loop", "vllm/v1/executor/multiproc_executor.py", 1]]}]
ALL_REDUCE = [{"name": "MainThread", "frames": [
    ["ncclAllReduce", "vllm/distributed/device_communicators/pynccl_wrapper.py", 1],
    ["all_reduce", "vllm/distributed/parallel_state.py", 1], ["execute_model", "vllm/v1/worker/gpu_model_runner.py", 1]]}]
EXECUTING = [{"name": "MainThread", "frames": [["_prepare_inputs", "vllm/v1/worker/gpu_model_runner.py", 1],
                                               ["execute_model", "vllm/v1/worker/gpu_model_runner.py", 1]]}]
ENGINE_WAITS = [{"name": "MainThread", "frames": [
    ["acquire_read", SHM, 1], ["dequeue", SHM, 1], ["get_response", "vllm/v1/executor/multiproc_executor.py", 1],
    ["collective_rpc", "vllm/v1/executor/multiproc_executor.py", 1], ["step", "vllm/v1/engine/core.py", 1]]}]
ENGINE_IDLE = [{"name": "MainThread", "frames": [["wait", "threading.py", 1], ["get", "queue.py", 1],
                                                ["_process_input_queue", "vllm/v1/engine/core.py", 1],
                                                ["run_busy_loop", "vllm/v1/engine/core.py", 1]]}]
RAYLET = "/opt/ray/core/src/ray/raylet/raylet --gcs-address=10.0.0.1:6379 --session_name=session_2026_1"


def _p(pid: int, ppid: int, role: str, title: str, **extra: Any) -> dict[str, Any]:
    argv = title.split(" ")
    return {"pid": pid, "ppid": ppid, "pgid": ppid, "role": role, "title": title, "cmdline": argv, "ranks": {},
            "titled": title.startswith(("VLLM::", "ray::")), "name": title.split("::")[-1], "state": "S",
            "comm": argv[0].rsplit("/", 1)[-1][:15], **extra}


def _tcp(pid: int, local: str, remote: str, state: str = "ESTABLISHED") -> dict[str, Any]:
    return {"local": local, "remote": remote, "state": state, "pids": [pid], "send_q": 0, "recv_q": 0, "inode": pid}


def _snap(node: str, procs: list[dict[str, Any]], parents: list[dict[str, Any]], stacks: dict[int, Any],
          tcp: list[dict[str, Any]], shm: list[dict[str, Any]]) -> Any:
    from vllmdiag.model import ProbeResult, Snapshot

    dumps = [{"pid": pid, "status": "ok", "threads": t, "resample": {"after_s": 0.3, "status": "ok", "threads": t}}
             for pid, t in stacks.items()]
    res = {"processes": ProbeResult("ok", 0.0, None, {"processes": procs, "parents": parents}),
           "stacks": ProbeResult("ok", 0.1, None, {"dumps": dumps}),
           "sockets": ProbeResult("ok", 0.0, None, {"tcp": tcp, "unix": []}),
           "shm": ProbeResult("ok", 0.0, None, {"segments": shm})}
    return Snapshot(node, "", "", 0.1, res)


def synthetic(b_engine_addr: str = "10.0.0.1:5000", b_stacks: tuple[Any, Any] = (ALL_REDUCE, EXECUTING),
              a_ranks: int = 2, engine_stack: Any = None, sizes: str = "") -> list[Any]:
    """Node A: API server (TP=4, Ray), EngineCore listening on 10.0.0.1:5000 with two readers from 10.0.0.2,
    ranks 0-1 (Ray actors mapping the engine's ring). Node B: a raylet, ranks 2-3 connected to ``b_engine_addr``."""
    api = _p(10, 1, "api_server", f"/usr/bin/python3 /usr/bin/vllm serve m {sizes or f'-tp {a_ranks + 2}'} "
             "--distributed-executor-backend ray")
    engine = _p(11, 10, "engine_core", "VLLM::EngineCore")
    a_workers = [_p(21 + i, 20, "worker", "ray::RayWorkerProc.run", executor="ray") for i in range(a_ranks)]
    tcp_a = [_tcp(11, "10.0.0.1:5000", "0.0.0.0:0", "LISTEN"), _tcp(11, "10.0.0.1:5000", "10.0.0.2:40001"),
             _tcp(11, "10.0.0.1:5000", "10.0.0.2:40002")]
    a = _snap("gpu00", [api, engine, *a_workers], [_p(20, 1, "raylet", RAYLET, selected_as="parent")],
              {11: engine_stack or ENGINE_WAITS, 21: ALL_REDUCE, 22: ALL_REDUCE}, tcp_a,
              [{"name": "psm_ring", "mapped_by": [11, *(w["pid"] for w in a_workers)]}])
    b_workers = [_p(31 + i, 30, "worker", "ray::RayWorkerProc.run", executor="ray") for i in range(2)]
    tcp_b = [_tcp(31, "10.0.0.2:40001", b_engine_addr), _tcp(32, "10.0.0.2:40002", b_engine_addr)]
    b = _snap("gpu01", b_workers, [_p(30, 1, "raylet", RAYLET, selected_as="parent")],
              {31: b_stacks[0], 32: b_stacks[1]}, tcp_b, [])
    return [a, b]


def test_a_remote_reader_waiting_for_work_is_idle_not_in_a_collective() -> None:
    from vllmdiag.analysis.views.stack_match import classify_threads

    assert classify_threads(REMOTE_IDLE, "worker").name == "idle"


def test_synthetic_cluster_names_the_straggler_on_node_b_by_its_global_rank() -> None:
    from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet

    rep = analyze_fleet(synthetic())
    assert rep.fleet is not None and [g.nodes for g in rep.fleet.groups] == [["gpu00", "gpu01"]]
    assert rep.verdict.layer == "gpu" and [(c.node, c.pid, c.rank) for c in rep.verdict.culprits] == [("gpu01", 32, 3)]


def test_workers_tied_to_an_engine_that_was_not_swept_stay_unjudged() -> None:
    from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet

    rep = analyze_fleet(synthetic(b_engine_addr="10.0.0.9:5000", b_stacks=(REMOTE_IDLE, REMOTE_IDLE)))
    assert rep.fleet is not None and rep.fleet.groups == []
    b = next(d for d in rep.deployments if d.node == "gpu01")
    assert b.verdict.status == "inconclusive" and not b.verdict.culprits, b.verdict.summary
    a = next(d for d in rep.deployments if d.node == "gpu00")
    assert a.verdict.status != "healthy" and not any(c.rank in (2, 3) for c in a.verdict.culprits), a.verdict.summary


def test_an_engine_whose_ranks_all_run_on_other_nodes_is_answered_by_the_sweep() -> None:
    from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet
    from vllmdiag.analysis.bisect import analyze

    idle: dict[str, Any] = {"a_ranks": 0, "b_stacks": (REMOTE_IDLE, REMOTE_IDLE), "engine_stack": ENGINE_IDLE}
    alone = analyze(synthetic(**idle)[:1])
    assert any(f.code == "process.workers_unseen" for f in alone.findings) and alone.verdict.status != "healthy"
    rep = analyze_fleet(synthetic(**idle))
    assert rep.fleet is not None and [g.nodes for g in rep.fleet.groups] == [["gpu00", "gpu01"]]
    assert not [f for f in rep.findings if f.code in ("process.workers_unseen", "process.engine_elsewhere")]
    ranks = sorted(p.ranks["tp"] for d in rep.deployments for p in d.processes if p.role == "worker")
    assert ranks == [0, 1] and rep.verdict.status == "healthy", rep.verdict.summary


def test_the_engine_node_blind_to_some_sockets_says_elsewhere_or_gone_is_unknown() -> None:
    from vllmdiag.analysis.bisect import analyze

    a = synthetic(engine_stack=ENGINE_IDLE, b_stacks=(REMOTE_IDLE, REMOTE_IDLE))[0]
    a.probes["sockets"].data["unreadable_pids"] = [22]
    a.probes["sockets"].data["tcp"] = []  # nothing that proves a remote reader
    rep = analyze([a])
    codes = {f.code for f in rep.findings}
    assert "process.ranks_elsewhere" in codes and "process.rank_missing" not in codes, codes
    elsewhere = next(f for f in rep.findings if f.code == "process.ranks_elsewhere")
    assert "could not be read" in elsewhere.message and rep.verdict.status != "healthy", elsewhere.message
    assert not rep.verdict.culprits, rep.verdict.culprits  # its ranks wait in all_reduce: no uniform hang claimed


def test_pipeline_stages_on_the_worker_node_get_vllm_global_ranks() -> None:
    from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet

    rep = analyze_fleet(synthetic(engine_stack=ENGINE_IDLE, b_stacks=(REMOTE_IDLE, REMOTE_IDLE), sizes="-tp 2 -pp 2"))
    b = sorted((p.ranks.get("pp"), p.ranks.get("tp")) for d in rep.deployments if d.node == "gpu01"
               for p in d.processes if p.role == "worker")
    assert b == [(1, 0), (1, 1)], b  # ranks 2-3 of PP=2 x TP=2: stage 1
    from vllmdiag.analysis.bisect import analyze

    alone = analyze(synthetic(engine_stack=ENGINE_IDLE, b_stacks=(REMOTE_IDLE, REMOTE_IDLE), sizes="-tp 2 -pp 2")[:1])
    elsewhere = [f for f in alone.findings if f.code == "process.ranks_elsewhere"]
    assert elsewhere and elsewhere[0].evidence["world"] == 4 and alone.verdict.status != "healthy"
