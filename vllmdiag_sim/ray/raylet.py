"""The sim's `raylet`: started before `vllm serve` (like `ray start --head`), it forks one actor
process per vLLM worker the driver asks for, so the workers are the raylet's children and not
the API server's, as on a real Ray cluster (vllm-internals 3.1b).

Titles follow Ray: the raylet's command line is a C++ binary's; actors are `ray::<Class>` while
idle and `ray::<Class>.<method>` while a task runs (Ray's `execute_task`). The raylet's own title
is one space-joined setproctitle string, as tools see retitled processes.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from multiprocessing.connection import Listener
from typing import Any

import setproctitle

from vllmdiag_sim import runtime

SOCKET_ENV = "VLLMDIAG_SIM_RAYLET"
RAYLET_TITLE = "/usr/local/lib/python3/site-packages/ray/core/src/ray/raylet/raylet --raylet_socket_name={sock} " \
               "--node_manager_port=0 --object_store_memory=0 --session_name=session_sim"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllmdiag_sim.ray.raylet")
    parser.add_argument("--socket", required=True)
    args = parser.parse_args(argv)
    setproctitle.setproctitle(RAYLET_TITLE.format(sock=args.socket))
    signal.signal(signal.SIGCHLD, lambda *_: _reap())
    with Listener(args.socket, "AF_UNIX") as listener:
        runtime.ack("raylet-ready")
        while True:
            with listener.accept() as conn:
                request = conn.recv()
                conn.send(_create_actors(request))
    return 0


def _reap() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass
    except ChildProcessError:
        pass


def _create_actors(request: dict[str, Any]) -> list[int]:
    """Fork one actor per spec; each runs its class's task loop (never returns)."""
    pids = []
    for spec in request["actors"]:
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                from vllmdiag_sim.vllm.v1.executor.ray_executor_v2 import RayWorkerProc

                RayWorkerProc.actor_main(spec)
            finally:
                os._exit(1)
        pids.append(pid)
    return pids


if __name__ == "__main__":
    sys.exit(main())
