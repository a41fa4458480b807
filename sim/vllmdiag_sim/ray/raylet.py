"""The sim's `raylet`: started before `vllm serve` (like `ray start --head`), it forks one actor
process per vLLM worker the driver asks for, so the workers are the raylet's children and not
the API server's, as on a real Ray cluster (vllm-internals 3.1b).

Titles follow Ray: the raylet's command line is a C++ binary's; actors are `ray::<Class>` while
idle and `ray::<Class>.<method>` while a task runs (Ray's `execute_task`). The raylet's own title
is one space-joined setproctitle string, as tools see retitled processes.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from multiprocessing.connection import Listener
from typing import Any

import setproctitle

from vllmdiag_sim import runtime

SOCKET_ENV = "VLLMDIAG_SIM_RAYLET"
NODES_ENV = "VLLMDIAG_SIM_RAY_NODES"  # the raylets of the cluster's other nodes (comma-separated sockets)
RAYLET = "/usr/local/lib/python3/site-packages/ray/core/src/ray/raylet/raylet"
# setproctitle has only the original argv's room (Ray's SPT_NOENV keeps environ out of it): the cluster
# flags go first so they survive the cut; the real raylet, a C++ binary, keeps its whole command line.
RAYLET_TITLE = RAYLET + " {cluster}--node_ip_address=127.0.0.1 --raylet_socket_name={sock} --node_manager_port=0 " \
    "--object_store_memory=0"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllmdiag_sim.ray.raylet")
    parser.add_argument("--socket", required=True)
    # The cluster's GCS (`ray start --address`): every raylet of one Ray cluster names the same one.
    parser.add_argument("--gcs-address", default=None)
    args = parser.parse_args(argv)
    cluster = (f"--gcs-address={args.gcs_address} --session_name=session_sim_{args.gcs_address.rsplit(':', 1)[-1]} "
               if args.gcs_address else "--session_name=session_sim ")
    setproctitle.setproctitle(RAYLET_TITLE.format(sock=args.socket, cluster=cluster))
    signal.signal(signal.SIGCHLD, lambda *_: _reap())
    with Listener(args.socket, "AF_UNIX") as listener:
        runtime.ack("raylet-ready")
        while True:
            # Anyone may connect (a diagnostic tool probing listeners): a peer that sends no
            # request is dropped, as the real raylet drops a bad client, and the node lives on.
            with contextlib.suppress(EOFError, OSError), listener.accept() as conn:
                request = conn.recv()
                if isinstance(request, dict) and isinstance(request.get("actors"), list):
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
            if spec.get("dir"):  # the sim's acks go to the driver's deployment (the one a fault is aimed at)
                os.environ[runtime.ENV_DIR] = spec["dir"]
            try:
                from vllmdiag_sim.vllm.v1.executor.ray_executor_v2 import RayWorkerProc

                RayWorkerProc.actor_main(spec)
            finally:
                os._exit(1)
        pids.append(pid)
    return pids


if __name__ == "__main__":
    sys.exit(main())
