"""The live tests of tests/unit/test_stack_rules.py, which says what they check: these start something."""

from __future__ import annotations

import pytest
from test_stack_rules import DC, PS, STEP, cls, thread  # noqa: F401 - shared with the pure half

from vllmdiag.analysis.views.stack_match import classify_threads, file_matches

SHM = "vllm/distributed/device_communicators/shm_broadcast.py"

ENGINE = [("run_busy_loop", "vllm/v1/engine/core.py"),
          ("run_with_fault_tolerance", "vllm/v1/fault_tolerance/engine_core_sentinel.py"),
          ("run_engine_core", "vllm/v1/engine/core.py")]


@pytest.mark.parametrize(("frames", "role", "expected"), [
    ([("poll", "zmq/sugar/poll.py"), ("SpinCondition.wait", SHM), ("_wait_until_readable", SHM), ("acquire_read", SHM),
      ("__enter__", "contextlib.py"), ("dequeue", SHM), ("worker_busy_loop", "vllm/v1/executor/multiproc_executor.py")],
     "worker", "idle"),
    ([("sched_yield", "vllm/distributed/utils.py"), ("wait", SHM), ("acquire_read", SHM), ("dequeue", SHM)], "worker", "idle"),
    ([("_prepare_inputs", "vllm/v1/worker/gpu_model_runner.py")] + STEP, "worker", "executing"),
    ([("forward", "vllm/model_executor/models/llama.py"), ("_model_forward", "vllm/v1/worker/gpu_model_runner.py")] + STEP,
     "worker", "executing"),
    ([("synchronize", "torch/cuda/streams.py"), ("_to_list", "vllm/v1/worker/gpu_model_runner.py")] + STEP,
     "worker", "sync_point"),
    ([("ncclCommInitRank", DC + "pynccl_wrapper.py"), ("_init_comm", DC + "pynccl.py"), ("__init__", DC + "pynccl.py")],
     "worker", "nccl_init"),
    ([("wait_until_ready", SHM), ("__init__", "vllm/v1/executor/multiproc_executor.py")], "worker", "wait_until_ready"),
    ([("wait", "multiprocessing/connection.py"), ("wait_for_ready", "vllm/v1/executor/multiproc_executor.py"),
      ("_init_executor", "vllm/v1/executor/multiproc_executor.py")], "engine_core", "wait_for_ready"),
    ([("poll", "zmq/sugar/poll.py"), ("wait_for_engine_startup", "vllm/v1/engine/utils.py")], "api_server", "handshake"),
    ([("init_distributed_environment", PS), ("init_device", "vllm/v1/worker/gpu_worker.py")], "worker", "init_device"),
    ([("poll", "zmq/sugar/poll.py"), ("SpinCondition.wait", SHM), ("acquire_read", SHM), ("__enter__", "contextlib.py"),
      ("dequeue", SHM), ("get_response", "vllm/v1/executor/multiproc_executor.py"),
      ("_wait_for_response", "vllm/v1/executor/multiproc_executor.py"), ("step", "vllm/v1/engine/core.py"),
      ("_process_engine_step", "vllm/v1/engine/core.py")] + ENGINE, "engine_core", "engine_waiting_workers"),
    ([("sched_yield", "vllm/distributed/utils.py"), ("acquire_write", SHM), ("__enter__", "contextlib.py"), ("enqueue", SHM),
      ("collective_rpc", "vllm/v1/executor/multiproc_executor.py")] + ENGINE, "engine_core", "engine_blocked_full_ring"),
    ([("wait", "threading.py"), ("get", "queue.py"), ("_process_input_queue", "vllm/v1/engine/core.py")] + ENGINE,
     "engine_core", "engine_idle"),
    ([("schedule", "vllm/v1/core/sched/scheduler.py"), ("step", "vllm/v1/engine/core.py")] + ENGINE,
     "engine_core", "engine_busy"),
    ([("select", "selectors.py"), ("_run_once", "asyncio/base_events.py"), ("run_forever", "asyncio/base_events.py")],
     "api_server", "api_idle"),
    ([("sleep", "time.py"), ("main", "app.py")], "worker", "unknown"),
])
def test_section_5_signatures(frames: list[tuple[str, str]], role: str, expected: str) -> None:
    assert cls(frames, role).name == expected


def test_most_informative_thread_speaks() -> None:
    """Async scheduling: MainThread back in dequeue while WorkerAsyncOutputCopy waits on a CUDA event."""
    main = thread([("acquire_read", SHM), ("dequeue", SHM), ("worker_busy_loop", "vllm/v1/executor/multiproc_executor.py")])
    copy = thread([("synchronize", "torch/cuda/streams.py"), ("get_output", "vllm/v1/worker/gpu_model_runner.py"),
                   ("async_output_busy_loop", "vllm/v1/executor/multiproc_executor.py")], "WorkerAsyncOutputCopy")
    monitor = thread([("recv", "multiprocessing/connection.py")], "DeathPipeMonitor")
    got = classify_threads([monitor, main, copy], "worker")
    assert (got.name, got.thread) == ("sync_point", "WorkerAsyncOutputCopy")
    assert classify_threads([monitor, main], "worker").thread == "MainThread"


def test_file_suffix_matches_whole_components() -> None:
    assert file_matches("vllm/distributed/device_communicators/shm_broadcast.py", "shm_broadcast.py")
    assert not file_matches("vllm/distributed/device_communicators/my_shm_broadcast.py", "shm_broadcast.py")
    assert file_matches("vllmdiag_sim/vllm/distributed/parallel_state.py", "*vllm/distributed/*")
