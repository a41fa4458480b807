"""Mirror of `vllm/platforms/cuda.py`, which runs `import vllm._C_stable_libtorch` at import and
`import vllm._moe_C_stable_libtorch` in `import_kernels()`: every process that resolved the CUDA
platform (API server, `LLM()` script, EngineCore, workers) maps vLLM's extension. The sim maps a
placeholder of the same name read-only, so `/proc/<pid>/maps` shows what real vLLM shows.
"""

from __future__ import annotations

import mmap
from pathlib import Path

_EXTENSION = Path(__file__).resolve().parent.parent / "_C_stable_libtorch.abi3.so"
_mapped: list[mmap.mmap] = []  # kept for the life of the process, as a loaded .so stays mapped


def import_kernels() -> None:
    if _mapped:
        return
    with open(_EXTENSION, "rb") as fh:
        _mapped.append(mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ))
