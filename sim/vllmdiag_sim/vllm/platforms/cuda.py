"""Mirror of `vllm/platforms/cuda.py`, which runs `import vllm._C_stable_libtorch` at import and
`import vllm._moe_C_stable_libtorch` in `import_kernels()`: every process that resolved the CUDA
platform (API server, `LLM()` script, EngineCore, workers) maps vLLM's extension. The sim maps a
placeholder of the same name read-only, so `/proc/<pid>/maps` shows what real vLLM shows, and
reserves the address space torch and CUDA take (a real vLLM process is GBs of virtual size).
"""

from __future__ import annotations

import mmap
from pathlib import Path

_EXTENSION = Path(__file__).resolve().parent.parent / "_C_stable_libtorch.abi3.so"
_mapped: list[mmap.mmap] = []  # kept for the life of the process, as a loaded .so stays mapped


# Address space that libtorch_cpu/libtorch_cuda/cuBLAS and the CUDA context take in a real vLLM
# process (GBs of mapped files and reservations): read-only, private, never touched, so it is neither
# committed nor resident.
_TORCH_AND_CUDA_BYTES = 2 << 30


def import_kernels() -> None:
    if _mapped:
        return
    with open(_EXTENSION, "rb") as fh:
        _mapped.append(mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ))
    _mapped.append(mmap.mmap(-1, _TORCH_AND_CUDA_BYTES, prot=mmap.PROT_READ,
                             flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS))
