"""A tiny process whose Python stack carries vLLM 0.33 frame names and files, for real py-spy dumps.

    python fake_rank.py TITLE MODE [--ready FILE] [--hold-lib LIB.so] [--ttl S]

Each frame is compiled with the file name vLLM's own code has (site-packages/vllm/...), so py-spy
reports what it would on a real rank (vllm-internals.md section 5). The process retitles itself
(setproctitle) so the processes probe sees a vLLM role. ``--hold-lib`` calls ``hold_in_vfork``
from a helper library at the leaf: the process then sits in vfork's wait, state D.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import time
from collections.abc import Callable
from typing import Any

SITE = "/opt/vllm-env/lib/python3.11/site-packages/"
SHM = "vllm/distributed/device_communicators/shm_broadcast.py"
EXEC = "vllm/v1/executor/multiproc_executor.py"
STEP = [("worker_main", EXEC), ("worker_busy_loop", EXEC), ("_execute_worker_rpc", EXEC),
        ("execute_model", "vllm/v1/worker/gpu_worker.py"), ("execute_model", "vllm/v1/worker/gpu_model_runner.py")]
FORWARD = STEP + [("_model_forward", "vllm/v1/worker/gpu_model_runner.py"), ("forward", "vllm/model_executor/layers/linear.py")]


def _coll(op: str) -> list[tuple[str, str]]:
    nccl = {"all_reduce": "ncclAllReduce", "all_gather": "ncclAllGather"}[op]
    return FORWARD + [(f"tensor_model_parallel_{op}", "vllm/distributed/communication_op.py"),
                      (op, "vllm/distributed/parallel_state.py"), (f"_{op}_out_place", "vllm/distributed/parallel_state.py"),
                      (op, "vllm/distributed/device_communicators/cuda_communicator.py"),
                      (op, "vllm/distributed/device_communicators/pynccl.py"),
                      (nccl, "vllm/distributed/device_communicators/pynccl_wrapper.py")]


ENGINE = [("run_engine_core", "vllm/v1/engine/core.py"), ("run_busy_loop", "vllm/v1/engine/core.py")]
MODES: dict[str, list[tuple[str, str]]] = {
    "idle": [("worker_main", EXEC), ("worker_busy_loop", EXEC), ("dequeue", SHM), ("__enter__", "contextlib.py"),
             ("acquire_read", SHM), ("_wait_until_readable", SHM), ("wait", SHM)],
    "executing": STEP + [("_prepare_inputs", "vllm/v1/worker/gpu_model_runner.py")],
    "all_reduce": _coll("all_reduce"),
    "all_gather": _coll("all_gather"),
    "engine_idle": ENGINE + [("_process_input_queue", "vllm/v1/engine/core.py"), ("get", "queue.py"), ("wait", "threading.py")],
    "engine_busy": ENGINE + [("_process_engine_step", "vllm/v1/engine/core.py"), ("step", "vllm/v1/engine/core.py"),
                             ("schedule", "vllm/v1/core/sched/scheduler.py")],
    "engine_waiting": ENGINE + [("_process_engine_step", "vllm/v1/engine/core.py"), ("step", "vllm/v1/engine/core.py"),
                                ("collective_rpc", EXEC), ("get_response", EXEC), ("dequeue", SHM),
                                ("acquire_read", SHM), ("wait", SHM)],
}


def build(chain: list[tuple[str, str]], leaf: Callable[[], Any]) -> Callable[[], Any]:
    fn = leaf
    for name, path in reversed(chain):
        ns: dict[str, Any] = {"_next": fn}
        # stdlib files keep their short name, as py-spy prints them; vLLM files live in site-packages
        code = compile(f"def {name}():\n    return _next()\n", path if "/" not in path else SITE + path, "exec")
        exec(code, ns)
        fn = ns[name]
    return fn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("title")
    ap.add_argument("mode", choices=sorted(MODES))
    ap.add_argument("--ready")
    ap.add_argument("--hold-lib")
    ap.add_argument("--ttl", type=float, default=60.0)
    args = ap.parse_args()
    import setproctitle

    setproctitle.setproctitle(args.title)
    end = time.monotonic() + args.ttl  # a leaked test process still goes away

    def leaf() -> None:
        if args.ready:
            with open(args.ready, "w") as fh:
                fh.write(str(os.getpid()))
        if args.hold_lib:
            ctypes.CDLL(args.hold_lib).hold_in_vfork()
        while time.monotonic() < end:
            time.sleep(0.05)

    build(MODES[args.mode], leaf)()
    sys.exit(0)


if __name__ == "__main__":
    main()
