"""The simulated API server: engine launch, ZMQ client sockets, and the readiness wait.

Like vLLM's `MPClient`, it binds the input ROUTER and output PULL before forking the
EngineCore(s) (fork is vLLM's default start method), then waits for one READY per engine
identity. HTTP is served by `http_frontend.ApiServer` once every engine is up.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import socket
import time
from multiprocessing import resource_tracker
from multiprocessing.process import BaseProcess
from typing import Any

import zmq

from vllmdiag_sim import collective, runtime
from vllmdiag_sim.vllm.config.parallel import ParallelConfig
from vllmdiag_sim.vllm.entrypoints.openai.http_frontend import ApiServer
from vllmdiag_sim.vllm.utils.network_utils import get_open_zmq_ipc_path, make_zmq_socket
from vllmdiag_sim.vllm.v1.engine.core import EngineCoreProc

logger = logging.getLogger("vllm.entrypoints.openai.api_server")
ENGINE_READY_TIMEOUT_S = 60.0


def launch_core_engines(pc: ParallelConfig, input_addr: str | list[str] | None,
                        output_addr: str | list[str] | None) -> list[BaseProcess]:
    """Fork the EngineCore(s). Each connects to every front end's input and output address (one pair per
    API server: several when `vllm serve` is a manager)."""
    # Started before the fork so the tracker is the API server's child, as in vLLM.
    resource_tracker.ensure_running()
    ctx = multiprocessing.get_context("fork")
    engines: list[BaseProcess] = []
    if pc.external_dp and pc.data_parallel_rank != 0:
        pc = dataclasses.replace(pc, dp_hub_ports=rendezvous_from_rank0())
    elif pc.data_parallel_size > 1 and pc.is_leader:
        pc = start_dp_group(pc, ctx)
    ranks = [pc.data_parallel_rank] if pc.data_parallel_rank is not None else range(pc.data_parallel_size)
    for dp_rank in ranks:
        hub: socket.socket | None = None
        if pc.tensor_parallel_size > 1 and pc.is_leader:
            hub = collective.listen(pc.master_port if pc.nnodes > 1 else 0)
        proc = ctx.Process(target=EngineCoreProc.run_engine_core, name=f"EngineCore_DP{dp_rank}",
                           args=(pc, dp_rank, as_list(input_addr), as_list(output_addr), hub))
        proc.start()
        if hub is not None:
            hub.close()
        engines.append(proc)
    return engines


def as_list(addr: str | list[str] | None) -> list[str]:
    return [] if addr is None else [addr] if isinstance(addr, str) else list(addr)


def start_dp_group(pc: ParallelConfig, ctx: Any) -> ParallelConfig:
    """DP > 1: the DP coordinator process; for a MoE model also one DP-group rendezvous per TP rank (served
    from this process) for the engines' per-step DP sync. Dense DP ranks are independent engines (vLLM
    0.32 `reconfigure_for_independent_dp_rank`): no DP group at all."""
    from vllmdiag_sim.vllm.v1.engine.coordinator import DPCoordinatorProc

    ctx.Process(target=DPCoordinatorProc.run_coordinator, name="VLLM_DP_Coordinator", daemon=True).start()
    base = runtime.deployment_dir()
    if not pc.synchronized_dp:
        if pc.external_dp and base is not None:
            runtime.write_json(base / RENDEZVOUS, {"ports": []})
        return pc
    ports = []
    for _ in range(pc.tensor_parallel_size):
        srv = collective.listen(0)
        collective.Hub(srv, pc.data_parallel_size).start()
        ports.append(srv.getsockname()[1])
    if pc.external_dp and base is not None:
        runtime.write_json(base / RENDEZVOUS, {"ports": ports})
    pc = dataclasses.replace(pc, dp_hub_ports=tuple(ports))
    if not pc.steps_in_waves:
        return pc
    engines = collective.listen(0)  # the engines' DP group (DPEngineCoreProc's unfinished-requests all-reduce)
    collective.Hub(engines, pc.data_parallel_size).start()
    pc = dataclasses.replace(pc, dp_engine_hub_port=engines.getsockname()[1])
    if pc.enable_expert_parallel:  # the EP group's MoE all2all (every DP x TP rank)
        ep = collective.listen(0)
        collective.Hub(ep, pc.data_parallel_size * pc.tensor_parallel_size).start()
        return dataclasses.replace(pc, ep_hub_port=ep.getsockname()[1])
    moe = []  # no EP: each MoE layer all-gathers / reduce-scatters across the DP group of each TP rank
    for _ in range(pc.tensor_parallel_size):
        srv = collective.listen(0)
        collective.Hub(srv, pc.data_parallel_size).start()
        moe.append(srv.getsockname()[1])
    return dataclasses.replace(pc, dp_moe_hub_ports=tuple(moe))


RENDEZVOUS = "dp-rendezvous.json"


def rendezvous_from_rank0() -> tuple[int, ...]:
    """External DP, rank > 0: the DP groups' ports from rank 0 (vLLM hands the DP master port over the
    handshake at --data-parallel-rpc-port; the sim reads what rank 0 recorded)."""
    base = runtime.deployment_dir()
    deadline = time.monotonic() + ENGINE_READY_TIMEOUT_S
    while base is not None and time.monotonic() < deadline:
        data = runtime.read_json(base / RENDEZVOUS)
        if isinstance(data, dict) and isinstance(data.get("ports"), list):
            return tuple(int(p) for p in data["ports"])
        time.sleep(0.05)
    raise TimeoutError("DP rank 0 did not publish the DP group rendezvous")


def wait_for_engine_startup(input_socket: zmq.Socket, engines: list[BaseProcess]) -> list[bytes]:
    identities: list[bytes] = []
    deadline = time.monotonic() + ENGINE_READY_TIMEOUT_S
    while len(identities) < len(engines):
        if input_socket.poll(100):
            identities.append(input_socket.recv_multipart()[0])
            continue
        failed = {p.name: p.exitcode for p in engines if not p.is_alive()}
        if failed:
            raise RuntimeError(f"Engine core initialization failed. See root cause above. "
                               f"Failed core proc(s): {failed}")
        if time.monotonic() > deadline:
            raise TimeoutError("Timed out waiting for engine core processes to start.")
    return sorted(identities)


def run_server(pc: ParallelConfig, model: str, host: str, port: int) -> None:
    ctx = zmq.Context()
    input_addr, output_addr = get_open_zmq_ipc_path(), get_open_zmq_ipc_path()
    input_socket = make_zmq_socket(ctx, input_addr, zmq.ROUTER, bind=True)
    output_socket = make_zmq_socket(ctx, output_addr, zmq.PULL, bind=True)
    engines = launch_core_engines(pc, input_addr, output_addr)
    identities = wait_for_engine_startup(input_socket, engines)
    server = ApiServer(model, input_addr, input_socket, output_socket, identities, engines)
    asyncio.run(server.serve(host, port))


def run_headless(pc: ParallelConfig) -> None:
    """A non-leader node: EngineCore(s) and workers only, no HTTP front end."""
    engines = launch_core_engines(pc, None, None)
    base = runtime.deployment_dir()
    while base is not None and not all((base / "acks" / f"engine-ready-{i}").exists()
                                       for i in range(len(engines))):
        if not all(p.is_alive() for p in engines):
            raise RuntimeError("Engine core initialization failed. See root cause above.")
        time.sleep(0.05)
    runtime.ack("api-ready")
    sentinels = [p.sentinel for p in engines]
    while sentinels:
        for s in multiprocessing.connection.wait(sentinels):
            sentinels.remove(s)  # type: ignore[arg-type]
