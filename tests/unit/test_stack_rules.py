"""Stack classification: real py-spy fixtures of vLLM 0.33.0 and the frame tables of
vllm-internals.md section 5; rule validation and user rules from $VLLMDIAG_STACK_RULES."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.analysis.views import stack_match as stacks
from vllmdiag.analysis.views.stack_match import StackRulesError, classify_threads, parse_rules

PS = "vllm/distributed/parallel_state.py"
DC = "vllm/distributed/device_communicators/"
STEP = [("execute_model", "vllm/v1/worker/gpu_model_runner.py"), ("execute_model", "vllm/v1/worker/gpu_worker.py"),
        ("_execute_worker_rpc", "vllm/v1/executor/multiproc_executor.py"),
        ("worker_busy_loop", "vllm/v1/executor/multiproc_executor.py")]
AR = [("_all_reduce_out_place", PS), ("all_reduce", PS),
      ("tensor_model_parallel_all_reduce", "vllm/distributed/communication_op.py"),
      ("forward", "vllm/model_executor/layers/linear.py"), ("_model_forward", "vllm/v1/worker/gpu_model_runner.py")] + STEP


def thread(frames: list[tuple[str, str]], name: str = "MainThread") -> dict[str, Any]:
    """Frames innermost first, as py-spy lists them."""
    return {"name": name, "frames": [[f, file, 1] for f, file in frames]}


def cls(frames: list[tuple[str, str]], role: str | None = None) -> stacks.StackClass:
    return classify_threads([thread(frames)], role)


def test_real_fixtures_classify(shared_data: Path) -> None:
    blocked = json.loads((shared_data / "enginecore-writer-blocked.pyspy.json").read_text())
    idle = json.loads((shared_data / "worker-idle-dequeue.pyspy.json").read_text())
    got = classify_threads(blocked, "engine_core")
    assert got.name == "engine_blocked_full_ring" and got.thread == "Thread-1 (<lambda>)"
    assert any("acquire_write" in k for k in got.key_frames)
    got = classify_threads(idle, "worker")
    assert (got.name, got.thread) == ("idle", "MainThread")
    assert got.where and "shm_broadcast.py" in got.where
    # The writer stack in a worker process is a blocked response ring, not the EngineCore's.
    assert classify_threads(blocked, "worker").name == "writer_blocked_full_ring"


@pytest.mark.parametrize(("leaf", "backend"), [
    ([("all_reduce", "vllm/_custom_ops.py"), ("_all_reduce_chunk", DC + "custom_all_reduce.py"),
      ("all_reduce", DC + "custom_all_reduce.py"), ("custom_all_reduce", DC + "custom_all_reduce.py")], "custom_ar"),
    ([("ncclAllReduce", DC + "pynccl_wrapper.py"), ("all_reduce", DC + "pynccl.py")], "pynccl"),
    ([("all_reduce_symmetric_with_copy_impl", DC + "pynccl.py"), ("__call__", "torch/_ops.py")], "nccl_symm_mem"),
    ([("quick_all_reduce", DC + "quick_all_reduce.py")], "quick_ar"),
    ([("all_reduce", DC + "flashinfer_all_reduce.py")], "flashinfer"),
    ([("all_reduce", DC + "symm_mem.py")], "symm_mem"),
    ([("all_reduce", "torch/distributed/distributed_c10d.py")], "torch"),
])
def test_all_reduce_backends_from_section_5_3(leaf: list[tuple[str, str]], backend: str) -> None:
    got = cls(leaf + [("all_reduce", DC + "cuda_communicator.py")] + AR, "worker")
    assert (got.name, got.op, got.backend) == ("collective", "all_reduce", backend)


@pytest.mark.parametrize(("frames", "op"), [
    ([("ncclAllGather", DC + "pynccl_wrapper.py"), ("all_gather", PS), ("tensor_model_parallel_all_gather",
      "vllm/distributed/communication_op.py")], "all_gather"),
    ([("reduce_scatter", PS)], "reduce_scatter"),
    ([("broadcast_tensor_dict", PS)], "broadcast"),
    ([("barrier", "torch/distributed/distributed_c10d.py")], "barrier"),
    ([("ncclSend", DC + "pynccl_wrapper.py"), ("send_tensor_dict", PS)], "send"),
    ([("recv_tensor_dict", PS)], "recv"),
])
def test_collective_ops(frames: list[tuple[str, str]], op: str) -> None:
    got = cls(frames + STEP, "worker")
    assert (got.name, got.op) == ("collective", op)


def test_shipped_rules_validate_and_bad_rules_are_rejected() -> None:
    rules = stacks.load_rules()
    assert {"idle", "executing", "collective", "sync_point", "engine_busy"} <= {r.cls for r in rules.rules}
    for bad in ({"rules": "x"}, {"rules": [{"class": "x"}]}, {"rules": [{"class": "x", "any": [{"fun": "y"}]}]},
                {"rules": [{"class": "x", "all": [{"func": "y"}], "when": 1}]}, {"rules": [{"class": "x", "any": "y"}]},
                {"rules": [{"class": "x", "any": [{"func": "y"}]}], "ops": {"a": 1}}):
        with pytest.raises(StackRulesError):
            parse_rules(bad, "test", base=False)
    with pytest.raises(StackRulesError, match="precedence"):
        parse_rules({"rules": [{"class": "new", "any": [{"func": "y"}]}], "precedence": []}, "test")


def test_user_rules_from_env_come_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    extra = tmp_path / "mine.yaml"
    extra.write_text("precedence: [kv_transfer]\nrules:\n  - class: kv_transfer\n"
                     "    any: [{func: wait_for_save, file: nixl_connector.py}]\n")
    monkeypatch.setenv(stacks.ENV_EXTRA, str(extra))
    got = cls([("wait_for_save", "vllm/distributed/kv_transfer/nixl_connector.py")] + STEP, "worker")
    assert got.name == "kv_transfer"
    extra.write_text("rules: [{class: broken}]\n")
    stacks._load_cached.cache_clear()
    with pytest.raises(StackRulesError):
        stacks.load_rules()
    stacks._load_cached.cache_clear()
