"""Deployment shapes (issue 14) on snapshots built like real vLLM 0.33 shows them: Ray workers under
a raylet, offline LLM() scripts, an engine orphaned by a killed API server, DP/EP/PP groups,
NVML pids inside containers, setproctitle titles read like psutil does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.bisect import analyze
from vllmdiag.analysis.views.deployment_shapes import gpu_index_by_pid, parent_kind
from vllmdiag.analysis.views.deployments import find_deployments
from vllmdiag.model import ProbeResult, Snapshot
from vllmdiag.probes._procfs import read_cmdline
from vllmdiag.vocab.titles import parse_cmdline


def proc(pid: int, ppid: int, role: str | None, title: str, ranks: dict[str, int] | None = None, **extra: Any
         ) -> dict[str, Any]:
    argv = title.split(" ")
    return {"pid": pid, "ppid": ppid, "pgid": extra.pop("pgid", ppid), "role": role, "title": title, "cmdline": argv,
            "titled": title.startswith(("VLLM::", "ray::")), "name": title.split("::")[-1], "ranks": ranks or {},
            "state": extra.pop("state", "S"), "comm": argv[0].rsplit("/", 1)[-1][:15], **extra}


def frames(*chain: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"name": "MainThread", "frames": [[f, file, 1] for f, file in chain]}]


IDLE = frames(("poll", "zmq/sugar/poll.py"), ("acquire_read", "vllm/distributed/device_communicators/shm_broadcast.py"),
              ("dequeue", "vllm/distributed/device_communicators/shm_broadcast.py"),
              ("worker_busy_loop", "vllm/v1/executor/multiproc_executor.py"))
ENGINE_IDLE = frames(("wait", "threading.py"), ("get", "queue.py"), ("_process_input_queue", "vllm/v1/engine/core.py"),
                     ("run_busy_loop", "vllm/v1/engine/core.py"))
ALL_REDUCE = frames(("ncclAllReduce", "vllm/distributed/device_communicators/pynccl_wrapper.py"),
                    ("all_reduce", "vllm/distributed/device_communicators/pynccl.py"),
                    ("all_reduce", "vllm/distributed/parallel_state.py"), ("forward", "vllm/model_executor/layers/linear.py"),
                    ("execute_model", "vllm/v1/worker/gpu_model_runner.py"))
EXECUTING = frames(("_prepare_inputs", "vllm/v1/worker/gpu_model_runner.py"),
                   ("execute_model", "vllm/v1/worker/gpu_model_runner.py"))
DP_SYNC = frames(("all_reduce", "torch/distributed/distributed_c10d.py"), ("_run_ar", "vllm/v1/worker/dp_utils.py"),
                 ("_synchronize_dp_ranks", "vllm/v1/worker/dp_utils.py"),
                 ("coordinate_batch_across_dp", "vllm/v1/worker/dp_utils.py"),
                 ("execute_model", "vllm/v1/worker/gpu_model_runner.py"))
EP_DISPATCH = frames(("dispatch", "deep_ep/buffer.py"),
                     ("_do_dispatch", "vllm/model_executor/layers/fused_moe/prepare_finalize/deepep_ht.py"),
                     ("prepare", "vllm/model_executor/layers/fused_moe/prepare_finalize/deepep_ht.py"),
                     ("forward", "vllm/model_executor/layers/fused_moe/layer.py"))
RECV = frames(("recv", "torch/distributed/distributed_c10d.py"), ("recv_tensor_dict", "vllm/distributed/parallel_state.py"),
              ("execute_model", "vllm/v1/worker/gpu_worker.py"))
RAY_DAG_WAIT = frames(("get", "ray/experimental/compiled_dag_ref.py"), ("result", "vllm/v1/executor/ray_executor.py"),
                      ("step_with_batch_queue", "vllm/v1/engine/core.py"), ("run_busy_loop", "vllm/v1/engine/core.py"))


def snap(procs: list[dict[str, Any]], stacks: dict[int, list[dict[str, Any]]] | None = None,
         again: dict[int, list[dict[str, Any]]] | None = None, parents: list[dict[str, Any]] | None = None,
         **probes: dict[str, Any]) -> Snapshot:
    dumps = []
    for pid, threads in (stacks or {}).items():
        d: dict[str, Any] = {"pid": pid, "status": "ok", "threads": threads}
        if again and pid in again:
            d["resample"] = {"after_s": 0.3, "status": "ok", "threads": again[pid]}
        dumps.append(d)
    res = {"processes": ProbeResult("ok", 0.0, None, {"processes": procs, "parents": parents or []}),
           "stacks": ProbeResult("ok", 0.1, None, {"dumps": dumps})}
    res.update({name: ProbeResult("ok", 0.0, None, data) for name, data in probes.items()})
    return Snapshot("n1", "", "", 0.1, res)


# ---- titles and command lines ------------------------------------------------------------------
@pytest.mark.parametrize("argv,role,executor", [
    (["ray::RayWorkerProc"], "worker", "ray"),
    (["ray::RayWorkerProc.run"], "worker", "ray"),
    (["ray::RayWorkerWrapper.__ray_call__"], "worker", "ray"),
    (["ray::RayWorkerWrapper.execute_method()"], "worker", "ray"),
    (["ray::IDLE"], None, None),
    (["ray::SomeOtherActor.run"], None, None),
    (["/usr/lib/python3/site-packages/ray/core/src/ray/raylet/raylet", "--raylet_socket_name=/tmp/x"], "raylet", None),
])
def test_ray_titles(argv: list[str], role: str | None, executor: str | None) -> None:
    info = parse_cmdline(argv)
    assert (info.role, info.executor) == (role, executor)


def test_cmdline_of_a_setproctitle_title_splits_on_spaces_like_psutil(tmp_path: Path) -> None:
    (tmp_path / "cmdline").write_bytes(b"/opt/ray/raylet --raylet_socket_name=/tmp/r --node_manager_port=0\0\0\0\0")
    assert read_cmdline(tmp_path) == ["/opt/ray/raylet", "--raylet_socket_name=/tmp/r", "--node_manager_port=0"]
    (tmp_path / "cmdline").write_bytes(b"VLLM::Worker_TP2" + b" " * 30)
    assert read_cmdline(tmp_path) == ["VLLM::Worker_TP2"]
    (tmp_path / "cmdline").write_bytes(b"python3\0-m\0vllm.entrypoints.openai.api_server\0--model\0a b\0")
    assert read_cmdline(tmp_path) == ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "a b"]


# ---- Ray ---------------------------------------------------------------------------------------
def ray_snapshot(worker_stacks: list[list[dict[str, Any]]], flag: bool = True, shm: bool = True,
                 again: dict[int, list[dict[str, Any]]] | None = None, engine_stack: Any = None) -> Snapshot:
    api_argv = "python3 /usr/bin/vllm serve m -tp 2" + (" --distributed-executor-backend ray" if flag else "")
    procs = [proc(10, 1, "api_server", api_argv), proc(11, 10, "engine_core", "VLLM::EngineCore")]
    workers = [proc(21 + i, 20, "worker", "ray::RayWorkerProc.run", executor="ray") for i in range(len(worker_stacks))]
    stacks = {11: engine_stack or ENGINE_IDLE, **{w["pid"]: s for w, s in zip(workers, worker_stacks, strict=True)}}
    raylet = proc(20, 1, "raylet", "/opt/ray/raylet --raylet_socket_name=/tmp/s", selected_as="parent")
    segs = {"segments": [{"name": "psm_abc", "mapped_by": [11, *[w["pid"] for w in workers]]}]} if shm else {"segments": []}
    return snap(procs + workers, stacks, again, parents=[raylet], shm=segs)


def test_ray_workers_under_a_raylet_join_their_engine_and_idle_is_healthy() -> None:
    s = ray_snapshot([IDLE, IDLE])
    rep = analyze([s])
    assert rep.verdict.status == "healthy", rep.verdict.summary
    dep = find_deployments(s)[0]
    assert dep.executor == "ray" and {21, 22} <= dep.pids
    assert dep.ray["ties"] == ["maps the engine's rpc ring (shared memory)"]
    assert [p["ranks"] for p in dep.workers] == [{"tp": 0}, {"tp": 1}]


def test_ray_straggler_is_named_and_confirmed_by_the_second_sample() -> None:
    again = {21: ALL_REDUCE, 22: EXECUTING}
    rep = analyze([ray_snapshot([ALL_REDUCE, EXECUTING], again=again)])
    v = rep.verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary
    assert (v.culprits[0].pid, v.culprits[0].rank, v.culprits[0].title) == (22, 1, "ray::RayWorkerProc.run")


def test_ray_workers_tied_without_shm_when_only_one_ray_engine() -> None:
    dep = find_deployments(ray_snapshot([IDLE, IDLE], shm=False))[0]
    assert dep.ray["ties"] == ["the only Ray-backed vLLM engine on this node"] and {21, 22} <= dep.pids


def test_ray_engine_without_visible_workers_is_never_healthy() -> None:
    s = ray_snapshot([])
    rep = analyze([s])
    assert rep.verdict.status != "healthy"
    assert any(f.code == "process.workers_unseen" for f in rep.findings)


def test_ray_compiled_dag_engine_wait_is_recognised() -> None:
    from vllmdiag.analysis.views.stack_match import classify_threads

    assert classify_threads(RAY_DAG_WAIT, "engine_core").name == "engine_waiting_workers"
    idle = frames(("read", "ray/experimental/channel/shared_memory_channel.py"),
                  ("do_exec_tasks", "ray/dag/compiled_dag_node.py"))
    assert classify_threads(idle, "worker").name == "idle"


def test_ray_workers_with_no_engine_here_form_a_ray_node() -> None:
    workers = [proc(21 + i, 20, "worker", "ray::RayWorkerProc.run", executor="ray") for i in range(2)]
    raylet = proc(20, 1, "raylet", "/opt/ray/raylet", selected_as="parent")
    s = snap(workers, {21: IDLE, 22: IDLE}, parents=[raylet])
    rep = analyze([s])
    # Their engine is on another node: idle here proves nothing about the deployment (issue 14, multi-node Ray).
    assert rep.verdict.status == "inconclusive" and not rep.verdict.culprits, rep.verdict.summary
    assert any(f.code == "process.engine_elsewhere" for f in rep.findings)
    assert find_deployments(s)[0].kind == "ray_node" and rep.deployments[0].root_pid == 20


def test_ray_ranks_follow_gpu_order_from_nvml() -> None:
    s = ray_snapshot([IDLE, IDLE])
    s.probes["nvml"] = ProbeResult("ok", 0.0, None, {"gpus": [{"index": 0, "processes": [{"pid": 22}]},
                                                              {"index": 1, "processes": [{"pid": 21}]}]})
    dep = find_deployments(s)[0]
    assert {p["pid"]: p["ranks"]["tp"] for p in dep.workers} == {22: 0, 21: 1}
    assert dep.ray["rank_source"] == "nvml-gpu-order"


# ---- offline and orphaned engines --------------------------------------------------------------
def test_offline_inprocess_workers_under_the_script_are_not_orphans() -> None:
    script = proc(10, 5, "llm_client", "python3 run.py", selected_as="parent", pgid=10,
                  environ={"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    workers = [proc(11 + i, 10, "worker", f"VLLM::Worker_TP{i}", {"tp": i}) for i in range(2)]
    s = snap([script, *workers], {10: ENGINE_IDLE, 11: IDLE, 12: IDLE})
    rep = analyze([s])
    assert rep.verdict.status == "healthy", rep.verdict.summary
    assert find_deployments(s)[0].kind == "offline_inprocess"


def test_offline_script_with_engine_child_is_healthy_when_idle() -> None:
    script = proc(10, 5, "llm_client", "python3 run.py", selected_as="parent", pgid=10)
    engine = proc(11, 10, "engine_core", "VLLM::EngineCore")
    s = snap([script, engine], {11: ENGINE_IDLE})
    rep = analyze([s])
    assert rep.verdict.status == "healthy", rep.verdict.summary
    assert find_deployments(s)[0].kind == "offline"


def test_a_python_parent_claims_only_its_own_process_group() -> None:
    """A harness that started two engines in their own sessions is not one offline deployment."""
    harness = proc(10, 5, "llm_client", "python3 harness.py", selected_as="parent", pgid=10)
    a, b = proc(11, 10, "engine_core", "VLLM::EngineCore", pgid=11), proc(12, 10, "engine_core", "VLLM::EngineCore", pgid=12)
    rep = analyze([snap([harness, a, b], {11: ENGINE_IDLE, 12: ENGINE_IDLE})])
    assert sorted(d.root_pid for d in rep.deployments) == [11, 12]


@pytest.mark.parametrize("adopter,pid,nspid", [("/sbin/init", 1, [1]), ("/bin/bash /entrypoint.sh", 700, [700, 1]),
                                               ("/usr/bin/tini -- vllm", 800, [800, 1]),
                                               ("/usr/lib/systemd/systemd --user", 900, [900])])
def test_engine_reparented_to_init_or_shell_is_an_orphaned_engine(adopter: str, pid: int, nspid: list[int]) -> None:
    parent = proc(pid, 0, None, adopter, selected_as="parent", nspid=nspid)
    engine = proc(11, pid, "engine_core", "VLLM::EngineCore")
    workers = [proc(12 + i, 11, "worker", f"VLLM::Worker_TP{i}", {"tp": i}) for i in range(2)]
    nvml = {"gpus": [{"index": 3, "processes": [{"pid": 12}]}, {"index": 5, "processes": [{"pid": 13}]}]}
    rep = analyze([snap([engine, *workers], {11: ENGINE_IDLE, 12: IDLE, 13: IDLE}, parents=[parent], nvml=nvml)])
    v = rep.verdict
    assert (v.status, v.layer) == ("blocked", "process"), v.summary
    assert (v.culprits[0].role, v.culprits[0].pid) == ("api_server", None)
    f = next(f for f in rep.findings if f.code == "process.frontend_missing")
    assert f.evidence["gpus"] == [3, 5] and "GPU(s) 3, 5" in f.message


def test_engine_under_a_plain_shell_is_not_called_orphaned() -> None:
    """vLLM never starts an engine from a shell that is not init: we cannot explain it, so no claim."""
    shell = proc(700, 5, None, "bash -c x", selected_as="parent", nspid=[700])
    assert parent_kind(shell, set()) == "unknown"


def test_python_init_of_a_container_is_the_client_only_with_evidence() -> None:
    """`docker run ... python run.py` (PID 1 in its namespace, binds the engine's sockets) vs a
    Python init that merely adopted an orphaned engine."""
    init = proc(900, 1, None, "python3 -m myinit", selected_as="parent", nspid=[900, 1])
    assert parent_kind(init, {900}) == "llm_client"
    assert parent_kind(init, set()) == "adopter"
    assert parent_kind(init, None) == "llm_client"  # could not tell: no alarm
    assert parent_kind(proc(901, 1, None, "python3 run.py", nspid=[901, 7]), set()) == "llm_client"


# ---- containers: NVML pids through NSpid ----------------------------------------------------------
def test_nvml_pid_of_a_containerised_process_is_found_through_nspid() -> None:
    procs = [proc(4242, 1, "worker", "VLLM::Worker_TP0", {"tp": 0}, nspid=[4242, 17])]
    # NVML inside the container reports the host pid or the namespace pid depending on the driver.
    assert gpu_index_by_pid({"gpus": [{"index": 2, "processes": [{"pid": 17}]}]}, procs) == {4242: 2}
    assert gpu_index_by_pid({"gpus": [{"index": 2, "processes": [{"pid": 4242}]}]}, procs) == {4242: 2}


# ---- data / expert / pipeline parallel ------------------------------------------------------------
def dp_snapshot(dp1: list[list[dict[str, Any]]], again: dict[int, list[dict[str, Any]]] | None = None,
                engine1: Any = None) -> Snapshot:
    """DP=2 x TP=2 under one API server with a DPCoordinator; DP0 waits in the DP sync."""
    procs = [proc(10, 1, "api_server", "python3 /usr/bin/vllm serve m -tp 2 -dp 2"),
             proc(11, 10, "dp_coordinator", "VLLM::DPCoordinator"),
             proc(12, 10, "engine_core", "VLLM::EngineCore_DP0", {"dp": 0}),
             proc(13, 10, "engine_core", "VLLM::EngineCore_DP1", {"dp": 1})]
    stacks: dict[int, Any] = {12: ENGINE_IDLE, 13: engine1 or ENGINE_IDLE}
    for d, eng in ((0, 12), (1, 13)):
        for t in range(2):
            pid = 20 + d * 2 + t
            procs.append(proc(pid, eng, "worker", f"VLLM::Worker_DP{d}_TP{t}", {"dp": d, "tp": t}))
            stacks[pid] = DP_SYNC if d == 0 else dp1[t]
    return snap(procs, stacks, again)


def test_dp_rank_out_of_step_is_the_culprit_once_it_holds() -> None:
    again = {20: DP_SYNC, 13: ENGINE_IDLE}
    rep = analyze([dp_snapshot([IDLE, IDLE], again)])
    v = rep.verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary
    assert (v.culprits[0].pid, v.culprits[0].role) == (13, "engine_core")  # DP1 never ran the step
    assert any(f.code == "gpu.dp_out_of_step" for f in rep.findings)


def test_dp_out_of_step_in_one_sample_is_only_a_warning_and_moving_is_nothing() -> None:
    rep = analyze([dp_snapshot([IDLE, IDLE])])
    assert rep.verdict.status == "degraded" and "one sample" in rep.verdict.summary
    moved = analyze([dp_snapshot([IDLE, IDLE], {20: IDLE, 13: ENGINE_IDLE})])
    assert moved.verdict.status == "healthy", moved.verdict.summary


def test_dp_out_of_step_in_one_sample_while_the_rings_moved_is_information() -> None:
    """A loaded node's late start can leave no budget for the resample: one picture of a DP rank out of
    step while the deployment's ring flags changed is most likely a step in passing (as gpu/ranks.py
    reads a TP group's), information, not a warning that calls the busy deployment degraded."""
    first = dp_snapshot([IDLE, IDLE])
    # The response ring of DP0's EngineCore (12) and workers (20, 21), as the rings probe records it.
    ring = {"name": "psm_1", "path": "/dev/shm/psm_1", "inode": 7, "size_bytes": 251658260, "mapped_by": [12, 20, 21],
            "mapped_by_other": [], "geometry": {"max_chunks": 10, "max_chunk_bytes": 25165824, "n_reader": 2},
            "format": "pickle", "score": 5, "samples": [{"t_s": 0.0, "written": 1, "unread": [0, 0], "flags": "11 00"},
                                                         {"t_s": 0.1, "written": 2, "unread": [0, 0], "flags": "11 11"}],
            "sample_count": 2, "window_s": 0.1, "unread_slots": [0, 0], "stable_unread": [0, 0], "written": 2,
            "full": False, "blocked_on": [], "writer_index": 0, "filling": [], "moved": True, "vanished": False,
            "unlinked": False, "last_method": None, "last_status": None, "last_overflow": None}
    first.probes["rings"] = ProbeResult("ok", 0.1, None, {"rings": [ring]})
    rep = analyze([first])
    odd = [f for f in rep.findings if f.code == "gpu.dp_out_of_step"]
    assert odd and all(f.severity == "info" and f.evidence.get("seen_moving") for f in odd), odd
    assert rep.verdict.status == "healthy", rep.verdict.summary
    ring.update(moved=False, written=1, samples=[{"t_s": 0.0, "written": 1, "unread": [0, 0], "flags": "11 00"},
                                                 {"t_s": 0.1, "written": 1, "unread": [0, 0]}])
    still = analyze([first])
    assert still.verdict.status == "degraded" and "one sample" in still.verdict.summary, still.verdict.summary


def held_for(first: Snapshot, seconds: float = 4.0) -> Snapshot:
    """The same picture again ``seconds`` later, as the confirm window's follow-up pass stores it."""
    first.collected_at = "2026-11-30T12:00:00+00:00"
    later = Snapshot.from_dict(first.to_dict())
    later.collected_at = f"2026-11-30T12:00:{int(seconds):02d}+00:00"
    first.passes = [later]
    return first


def test_dp_rank_busy_elsewhere_names_its_busy_worker() -> None:
    # A busy rank seen twice 0.3 s apart may be a healthy step's next layer: only a held stall names it.
    again = {20: DP_SYNC, 23: EXECUTING}
    assert not any(f.code == "gpu.dp_out_of_step" for f in analyze([dp_snapshot([IDLE, EXECUTING], again)]).findings)
    v = analyze([held_for(dp_snapshot([IDLE, EXECUTING], again))]).verdict
    assert (v.status, v.layer, v.culprits[0].pid) == ("blocked", "gpu", 23), v.summary


def test_dp_ranks_all_in_the_sync_are_fine() -> None:
    rep = analyze([dp_snapshot([DP_SYNC, DP_SYNC], {20: DP_SYNC, 22: DP_SYNC})])
    assert not any(f.code == "gpu.dp_out_of_step" for f in rep.findings)


def test_ep_rank_missing_from_the_all2all_is_named_across_dp_ranks() -> None:
    procs = [proc(10, 1, "api_server", "python3 /usr/bin/vllm serve m -tp 2 -dp 2 --enable-expert-parallel")]
    stacks: dict[int, Any] = {}
    for d in range(2):
        procs.append(proc(11 + d, 10, "engine_core", f"VLLM::EngineCore_DP{d}", {"dp": d}))
        stacks[11 + d] = ENGINE_IDLE
        for t in range(2):
            pid, ep = 20 + d * 2 + t, d * 2 + t
            procs.append(proc(pid, 11 + d, "worker", f"VLLM::Worker_DP{d}_TP{t}_EP{ep}", {"dp": d, "tp": t, "ep": ep}))
            stacks[pid] = EP_DISPATCH
    stacks[22] = stacks[23] = IDLE  # all of DP1 never reached the MoE layer: TP groups look fine
    rep = analyze([snap(procs, stacks, {20: EP_DISPATCH, 22: IDLE, 23: IDLE})])
    f = next(f for f in rep.findings if f.code == "gpu.ep_rank_odd")
    assert set(f.pids) == {22, 23} and f.severity == "critical"
    assert rep.verdict.layer == "gpu" and rep.verdict.culprits[0].pid in (22, 23)


def test_pp_stage_waiting_on_recv_names_the_stuck_upstream_stage() -> None:
    procs = [proc(10, 1, "api_server", "python3 /usr/bin/vllm serve m -tp 2 -pp 2"),
             proc(11, 10, "engine_core", "VLLM::EngineCore")]
    stacks: dict[int, Any] = {11: ENGINE_IDLE}
    for pp in range(2):
        for t in range(2):
            pid = 20 + pp * 2 + t
            procs.append(proc(pid, 11, "worker", f"VLLM::Worker_PP{pp}_TP{t}", {"pp": pp, "tp": t}))
            stacks[pid] = RECV if pp == 1 else (EXECUTING if t == 1 else ALL_REDUCE)
    rep = analyze([held_for(snap(procs, stacks, {22: RECV, 21: EXECUTING, 20: ALL_REDUCE}))])
    f = next(f for f in rep.findings if f.code == "gpu.pp_stage_stuck")
    assert f.pids == [21] and f.severity == "critical"
    assert rep.verdict.culprits[0].pid == 21  # the TP straggler of stage 0, not a waiting stage-1 rank


def test_stacks_probe_dumps_ray_workers_outside_the_tree_of_the_pid_asked_for() -> None:
    from vllmdiag.probes.stacks import select_targets

    rows = [proc(10, 1, "api_server", "python3 /usr/bin/vllm serve m"), proc(11, 10, "engine_core", "VLLM::EngineCore"),
            proc(21, 20, "worker", "ray::RayWorkerProc.run", executor="ray"),
            proc(31, 30, "worker", "VLLM::Worker_TP0", {"tp": 0})]  # another deployment's worker
    chosen = {p["pid"] for p in select_targets({"processes": rows, "self_pid": 0}, [10])}
    assert chosen == {10, 11, 21}
    # an MP deployment (its engine has worker children) does not pull in the node's Ray actors
    rows.append(proc(12, 11, "worker", "VLLM::Worker_TP0", {"tp": 0}))
    chosen = {p["pid"] for p in select_targets({"processes": rows, "self_pid": 0}, [10])}
    assert chosen == {10, 11, 12}


def test_an_odd_picture_while_tokens_flow_is_a_step_in_passing() -> None:
    """On a starved CPU a healthy step can show TP1 in its forward twice while TP0 waits; tokens that
    came out meanwhile say it moved (seen on the Ray sim at load 14)."""
    def with_metrics(s: Snapshot, tokens: list[int]) -> Snapshot:
        s.probes["http"] = ProbeResult("ok", 0.1, None, {"servers": [{"pids": [10], "metrics": [
            {"status": 200, "running": 1, "waiting": 0, "generation_tokens": t} for t in tokens]}]})
        return s

    again = {21: ALL_REDUCE, 22: EXECUTING}
    moving = analyze([with_metrics(ray_snapshot([ALL_REDUCE, EXECUTING], again=again), [34, 43])])
    assert moving.verdict.status == "healthy", moving.verdict.summary
    stuck = analyze([with_metrics(ray_snapshot([ALL_REDUCE, EXECUTING], again=again), [34, 34])])
    assert (stuck.verdict.status, stuck.verdict.layer) == ("blocked", "gpu"), stuck.verdict.summary
