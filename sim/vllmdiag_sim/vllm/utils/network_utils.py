"""Mirror of `vllm/utils/network_utils.py`: ipc paths and ZMQ socket construction."""

from __future__ import annotations

import os
import tempfile
import uuid

import zmq

from vllmdiag_sim import runtime


def get_open_zmq_ipc_path() -> str:
    base = os.environ.get("VLLM_RPC_BASE_PATH") or tempfile.gettempdir()
    path = os.path.join(base, str(uuid.uuid4()))
    # vLLM never unlinks these; the sim records them so `sim down` can.
    runtime.record("ipc", path)
    return f"ipc://{path}"


def make_zmq_socket(
    ctx: zmq.Context, path: str, socket_type: int, bind: bool | None = None,
    identity: bytes | None = None, linger: int | None = None,
) -> zmq.Socket:
    sock = ctx.socket(socket_type)
    if socket_type in (zmq.PULL, zmq.DEALER, zmq.ROUTER):
        sock.setsockopt(zmq.RCVHWM, 0)
    if socket_type in (zmq.PUSH, zmq.DEALER, zmq.ROUTER):
        sock.setsockopt(zmq.SNDHWM, 0)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    if linger is not None:
        sock.setsockopt(zmq.LINGER, linger)
    if bind is None:
        bind = socket_type not in (zmq.PUSH, zmq.SUB, zmq.XSUB)
    if bind:
        sock.bind(path)
    else:
        sock.connect(path)
    return sock
