"""Deployment shapes beyond `vllm serve` with the multiprocessing executor (issue 14).

- ``offline``: a user's script runs `LLM(...)`; the EngineCore is its child (multiprocessing).
- ``offline-inproc``: the same with `VLLM_ENABLE_V1_MULTIPROCESSING=0`: engine inside the script,
  workers are the script's children; at TP=1 there is no child, the model runs in the script.
- ``ray``: a raylet is started first (a cluster started beforehand, like `ray start --head`), then
  `vllm serve --distributed-executor-backend ray`; the workers are the raylet's children. With
  ``nnodes`` > 1 (namespaced nodes), a Ray cluster: the other nodes run only a raylet whose actors
  hold the ranks the driver places there (``ray_cluster_argv``).
- ``pp``: `vllm serve --pipeline-parallel-size 2`: PP=2 x TP stages; workers `VLLM::Worker_PP{p}_TP{t}`,
  global rank p * TP + t, intermediate tensors sent stage to stage (`isend_tensor_dict` / `recv_object`).
- ``dp``: `vllm serve <MoE model> -dp N --api-server-count 1`: MoE DP ranks step in request waves
  (`DPEngineCoreProc`, dummy batches), meet in a per-step DP sync and in every MoE layer's dispatch
  (all-gather) and combine across the DP ranks (`AgRsAll2AllManager`, the CPU platform's only one);
  workers `VLLM::Worker_DP{d}[_TP{t}]`. (A dense model at `--dp N` is shape ``serve``: N independent
  engines under a manager `vllm serve`, see vllm/entrypoints/cli/serve.py.)
- ``ep``: `vllm serve -dp 2 --enable-expert-parallel --all2all-backend deepep_high_throughput`: a MoE
  model whose DP ranks step in lockstep (request waves, dummy batches) and meet every step in the DP
  sync and the DeepEP dispatch/combine of the EP group (every DP x TP rank); workers
  `VLLM::Worker_DP{d}[_TP{t}]_EP{e}`.
- ``pd``: the decode instance of a disaggregated P/D pair, `vllm serve --kv-transfer-config
  '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'` with the NIXL side channel on a free port
  (`VLLM_NIXL_SIDE_CHANNEL_HOST/PORT`). Its prefill instance is not simulated (fault ``kv-wait``).
The orphaned engine is a fault (``api-killed``) on a running deployment of any shape with an API server.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from vllmdiag_sim import runtime
from vllmdiag_sim.ray.raylet import NODES_ENV, SOCKET_ENV

if TYPE_CHECKING:
    from vllmdiag_sim.deployment import Deployment

SHAPES = ("serve", "offline", "offline-inproc", "ray", "dp", "ns", "pp", "dp-external", "ep", "pd")
PP_SIZE = 2  # shape pp: two pipeline stages
PD_CONFIG = {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}  # shape pd: a decode instance
SHAPE_FAULTS = {"offline": ("healthy", "straggler", "worker-stopped", "worker-killed"),
                # TP=1: no child at all, the model runs in the script (UniProcExecutor)
                "offline-inproc": ("healthy", "healthy-load", "straggler", "worker-stopped", "worker-killed",
                                   "uniform-sync"),
                # No worker-killed: the raylet reaps its actors at once (no zombie stays).
                "ray": ("healthy", "healthy-load", "straggler", "collective-mismatch", "uniform-collective", "worker-stopped",
                        "worker-gone", "rpc-ring-full", "api-killed"),
                # `vllm serve <MoE model> -dp N --api-server-count 1`: a DPCoordinator, workers titled
                # Worker_DPn_TPm and the per-step DP sync of MoE models (a dense model's `--dp N` is shape serve)
                "dp": ("healthy", "healthy-load", "dp-out-of-step", "straggler", "worker-stopped", "api-killed",
                       "dp-rank-held"),
                # `vllm serve` in its own PID+mount namespace (a container): its init is Python (nsinit)
                "ns": ("healthy", "healthy-load", "straggler", "api-killed"),
                # `vllm serve -pp 2`: a stage waits in recv for a stuck upstream stage; a TP straggler
                # inside stage 0 (ranks 0..TP-1) stops stage 1 too
                "pp": ("healthy", "healthy-load", "pp-stage-stuck", "straggler", "worker-stopped"),
                # external DP load balancing: one `vllm serve --data-parallel-rank r` per DP rank (two here),
                # each with its own API server and EngineCore_DP<r>, meeting only in the DP sync
                "dp-external": ("healthy", "healthy-load", "dp-out-of-step"),
                # DP x TP with expert parallel: one EP rank stays out of the MoE dispatch its peers wait in
                "ep": ("healthy", "healthy-load", "ep-rank-odd"),
                # disaggregated P/D: the decode instance (NixlConnector kv_consumer) of a P/D pair whose
                # prefill instance is not simulated; kv-wait: its KV never comes
                "pd": ("healthy", "healthy-load", "kv-wait")}


class ShapeError(ValueError):
    pass


def validate(shape: str, fault: str, tp: int, dp: int, nnodes: int) -> None:
    if shape not in SHAPES:
        raise ShapeError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")
    if shape == "ep" and (dp < 2 or nnodes != 1):
        raise ShapeError("shape ep needs --dp 2 or more on one node")
    if shape == "ray" and nnodes > 1 and dp == 1:
        pass  # a Ray cluster of `nnodes` namespaced nodes; the engine's node is node rank 0
    elif shape not in ("serve", "dp", "ns", "dp-external", "ep") and (dp != 1 or nnodes != 1):
        raise ShapeError(f"shape {shape} runs DP=1 on one node")
    if shape == "pp" and fault == "pp-stage-stuck" and tp < 2:
        raise ShapeError("pp-stage-stuck wedges a stage's TP all_reduce: --tp 2 or more")
    if shape == "dp-external" and (dp != 2 or nnodes != 1):
        raise ShapeError("shape dp-external runs DP ranks 0 and 1 (--dp 2) on one node")
    if shape == "dp" and (dp < 2 or nnodes != 1):
        raise ShapeError("shape dp needs --dp 2 or more on one node")
    if shape != "serve" and fault not in SHAPE_FAULTS[shape]:
        raise ShapeError(f"shape {shape} supports faults {', '.join(SHAPE_FAULTS[shape])}")


MOE_MODEL = "mistralai/Mixtral-8x7B-Instruct-v0.1"  # shapes whose DP ranks step together need a MoE model
MOE_SHAPES = ("dp", "dp-external", "ep")


def launch_argv(dep: Deployment, base_argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """The command line and extra environment of the deployment's top process."""
    if dep.shape in MOE_SHAPES and "serve" in base_argv:
        base_argv = list(base_argv)
        at = base_argv.index("serve") + 1
        from vllmdiag_sim.vllm.config.parallel import ParallelConfig

        if not ParallelConfig.is_moe_model(base_argv[at]):
            base_argv[at] = MOE_MODEL
        if dep.shape != "dp-external":  # one API server inside `vllm serve` (vLLM's default: one per DP rank)
            base_argv += ["--api-server-count", "1"]
    if dep.shape in ("offline", "offline-inproc"):
        argv = [sys.executable, "-m", "vllmdiag_sim.vllm.entrypoints.llm", "--tp", str(dep.tp)]
        return argv, ({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if dep.shape == "offline-inproc" else {})
    if dep.shape == "ray" and dep.nnodes > 1:
        return ray_cluster_argv(dep, base_argv)
    if dep.shape == "ray":
        sock = str(dep.path / "raylet.sock")
        dep.extra_tops = [start_raylet(dep, sock)]
        return base_argv + ["--distributed-executor-backend", "ray"], {SOCKET_ENV: sock}
    if dep.shape == "pp":
        return base_argv + ["--pipeline-parallel-size", str(PP_SIZE)], {}
    if dep.shape == "dp-external":
        return external_dp_argv(dep, base_argv)
    if dep.shape == "ep":
        return base_argv + ["--enable-expert-parallel", "--all2all-backend", "deepep_high_throughput"], {}
    if dep.shape == "pd":
        return base_argv + ["--kv-transfer-config", json.dumps(PD_CONFIG)], {
            "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1", "VLLM_NIXL_SIDE_CHANNEL_PORT": str(runtime.free_port())}
    if dep.shape == "ns":
        from vllmdiag_sim.nsinit import STAY_ENV

        return base_argv, {STAY_ENV: "1"}
    return base_argv, {}


def ray_cluster_dir(master_port: int) -> Path:
    from vllmdiag_sim.deployment import state_root

    return state_root() / f"raycluster-{master_port}"


def ray_cluster_argv(dep: Deployment, base_argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """One node of a Ray cluster (each its own namespace): node rank 0 runs `ray start --head` and
    `vllm serve --distributed-executor-backend ray` (the driver places ranks on every raylet),
    the others only a raylet (`ray start --address=<head> --block`). Start the others first."""
    if not dep.namespace:
        raise ShapeError("a multi-node Ray cluster needs --namespace (one PID+mount namespace per node)")
    cluster = ray_cluster_dir(dep.master_port)
    cluster.mkdir(parents=True, exist_ok=True)
    gcs = f"127.0.0.1:{dep.master_port}"
    sock = str(cluster / f"node{dep.node_rank}.sock")
    if dep.node_rank > 0:
        return [sys.executable, "-m", "vllmdiag_sim.ray.raylet", "--socket", sock, "--gcs-address", gcs], \
            {"SPT_NOENV": "1"}
    peers = [str(cluster / f"node{r}.sock") for r in range(1, dep.nnodes)]
    argv = [sys.executable, "-m", "vllmdiag_sim.ray.start", "--socket", sock, "--gcs-address", gcs, "--"]
    return argv + base_argv + ["--distributed-executor-backend", "ray"], {SOCKET_ENV: sock, NODES_ENV: ",".join(peers)}


def external_dp_argv(dep: Deployment, base_argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """Rank 0's `vllm serve` starts first (it serves the DP rendezvous and the DPCoordinator, and its
    pid, the lower, is the deployment's root); the launcher is rank 1's, told apart by its records' tag."""
    rpc_port = runtime.free_port()  # the DP groups' rendezvous follow it
    flags = ["--data-parallel-address", "127.0.0.1", "--data-parallel-rpc-port", str(rpc_port)]
    env = {**os.environ, runtime.ENV_DIR: dep.dir,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH")]))}
    with open(dep.path / "log.txt", "ab") as log:
        rank0 = subprocess.Popen(base_argv + ["--data-parallel-rank", "0", *flags], stdin=subprocess.DEVNULL,
                                 stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    dep.extra_tops = [rank0.pid]
    dep._extra_popens = [rank0]  # type: ignore[attr-defined]  # reaped on down
    rank1 = list(base_argv)
    if "--port" in rank1:  # each rank's API server has its own HTTP port
        rank1[rank1.index("--port") + 1] = str(runtime.free_port())
    return rank1 + ["--data-parallel-rank", "1", *flags], {runtime.ENV_API_TAG: "dp1"}


def start_raylet(dep: Deployment, sock: str) -> int:
    env = {**os.environ, runtime.ENV_DIR: dep.dir, "SPT_NOENV": "1"}  # Ray keeps environ readable
    with open(dep.path / "log.txt", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-m", "vllmdiag_sim.ray.raylet", "--socket", sock],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    deadline = time.monotonic() + 15
    while not (dep.path / "acks" / "raylet-ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the sim raylet did not start:\n{dep.log_tail()}")
        time.sleep(0.02)
    dep._raylet = proc  # type: ignore[attr-defined]  # reaped on down
    return proc.pid


def annotate(dep: Deployment, procs: list[dict[str, Any]]) -> None:
    """Ray actors carry no rank in their title: take it from what each actor recorded. PP workers'
    titles carry the stage and the TP rank: the sim's rank is the global one."""
    ranks = {}
    for line in runtime.read_records(dep.path, "ray_workers"):
        rank, _, pid = line.partition(" ")
        if rank.isdigit() and pid.isdigit():
            ranks[int(pid)] = int(rank)
    _dense_dp_workers(dep, procs)
    for p in procs:
        if p["role"] == "worker" and p["pid"] in ranks:
            p["rank"], p["dp_rank"] = ranks[p["pid"]], 0
        if p["role"] == "worker" and "pp_rank" in p and p.get("rank") is not None:
            p["rank"] = p.pop("pp_rank") * dep.tp + p["rank"]  # vLLM's global rank: TP fastest


def _dense_dp_workers(dep: Deployment, found: list[dict[str, Any]]) -> None:
    """A dense DP rank's workers carry no DP rank in their title (a lone one is plain "VLLM::Worker" for
    good): their DP rank is their parent engine's, their rank what the worker acked once past init_device."""
    engines = {p["pid"]: p["dp_rank"] for p in found if p["role"] == "engine_core"}
    if len(engines) < 2:
        return
    titled: dict[int, tuple[int, int]] = {}
    acks = dep.path / "acks"
    for f in acks.glob("worker-titled-*") if acks.is_dir() else []:
        parts = f.name.removeprefix("worker-titled-").split("-")
        if len(parts) == 3 and all(x.isdigit() for x in parts):
            titled[int(parts[0])] = (int(parts[1]), int(parts[2]))
    from vllmdiag_sim import faults, procs

    for p in found:
        parent = procs.parent_pid(p["pid"]) if p["role"] == "worker" else None
        if parent not in engines:
            continue
        p["dp_rank"] = engines[parent]
        if p.get("rank") is None and faults.own_pid(p["pid"]) in titled:
            p["rank"] = titled[faults.own_pid(p["pid"])][1]


def wait_dp_sync(dep: Deployment, rank: int | None) -> None:
    """Until every TP rank of every other DP rank waits in the DP sync for DP rank ``rank``."""
    others = [d for d in range(dep.dp) if d != rank]
    acks = [f"dp-sync-{d}-{t}" for d in others for t in range(dep.tp)]
    deadline = time.monotonic() + 20
    while not all((dep.path / "acks" / a).exists() for a in acks):
        if time.monotonic() > deadline:
            raise TimeoutError("the other DP ranks did not reach the DP sync")
        time.sleep(0.02)
    time.sleep(0.3)  # into the receive


def kill_api_server(dep: Deployment, rank: int | None) -> None:
    """vLLM #55510: SIGKILL the API server; its EngineCore and workers live on, reparented."""
    api = dep.root_pid
    engine = dep.engine_pid()
    os.kill(api, signal.SIGKILL)
    popen = getattr(dep, "_popen", None)
    if popen is not None and popen.pid == api:
        popen.wait(timeout=10)  # reap it if it is our child, so it is gone, not a zombie
    dep.root_pid = engine  # the top of what is left
    dep.save()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(engine).ppid() != api:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.02)
    raise TimeoutError("the EngineCore was not reparented after its API server died")


def world_size(dep: Deployment) -> int:
    """Workers of one DP replica."""
    return dep.tp * (PP_SIZE if dep.shape == "pp" else 1)
