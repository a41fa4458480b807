"""Multi-node Ray (vLLM 0.33 RayExecutorV2): `vllm serve --distributed-executor-backend ray` with TP=4 over
a two-node Ray cluster. Node A (gpu00) runs the API server, the EngineCore and ranks 0-1; node B (gpu01)
only a raylet whose actors hold ranks 2-3 and read the engine's rpc queue over TCP. Each node is a real
PID+mount namespace swept through ClusterShell's exec worker with nsenter; the saved sweep is analysed
again offline. Seen alone, neither node reads healthy and nothing is blamed on it; swept together, the
workers on B are tied to A's engine by their TCP connections and the whole group is compared."""

from __future__ import annotations

from typing import Any

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
