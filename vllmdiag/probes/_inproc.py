"""Evidence for user Python processes that may run vLLM inside themselves (used by processes.py).

An offline `LLM()` at TP=1 with `VLLM_ENABLE_V1_MULTIPROCESSING=0` has no vLLM title and no vLLM
child: the EngineCore (InprocClient) and the UniProcExecutor's model runner run in the user's
script. What real vLLM 0.33 leaves visible without touching the target: its compiled kernels in
``/proc/<pid>/maps`` (``vllm/platforms/cuda.py`` imports ``vllm._C_stable_libtorch`` at import,
``import_kernels`` adds ``vllm._moe_C_stable_libtorch``; the attention kernels live under
``vllm/vllm_flash_attn/``; older wheels ship ``vllm/_C.abi3.so``), the GPU device files it holds
open, and its environment. This module only collects that evidence, for Python processes no title
selected; analysis decides what they are.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from vllmdiag.probes._procfs import read_text, readlink

# A compiled extension directly in a `vllm` package directory (or its flash-attention subpackage).
EXTENSION = re.compile(r"/vllm/(?:vllm_flash_attn/)?_[A-Za-z0-9_]*\.(?:abi3\.|cpython-[^/]*\.)?so$")
PYTHON = re.compile(r"^(?:python|pypy)[0-9.]*[a-z]?$")
MAPS_LIMIT = 4 << 20  # bytes of maps read per candidate at most (a CUDA process has ~1 MB)
MAPS_CHUNK = 64 << 10
MAX_FDS = 4096
MAX_CANDIDATES = 64  # a node with hundreds of Python processes: the 64 largest (RSS) are read
# vLLM's kernels link libtorch: a process that mapped them maps libtorch_cpu (~0.5 GB of file) and,
# on CUDA, libtorch_cuda and cuBLAS (GBs) too. Virtual size counts mapped files whether or not their
# pages are resident (swapping does not shrink it), so below this the maps are not worth reading.
MIN_VSIZE_BYTES = 512 << 20
# Reading the maps of a torch-sized process costs ~3 ms of kernel time (~3,000 lines): in parallel,
# and the scan as a whole is bounded; what it did not reach is recorded as unchecked, never as "no vLLM".
SCAN_THREADS = 8
SCAN_BUDGET_S = 0.5


def is_python(argv: list[str]) -> bool:
    return bool(argv) and bool(PYTHON.match(argv[0].rsplit("/", 1)[-1]))


def extensions_in(maps_text: str) -> list[str]:
    """vLLM extension paths in a maps text (deleted files keep their name: ` (deleted)` is cut)."""
    out: dict[str, None] = {}
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6:
            path = parts[5].removesuffix(" (deleted)")
            if EXTENSION.search(path):
                out.setdefault(path, None)
    return list(out)


def mapped_extensions(maps: Path, limit: int = MAPS_LIMIT) -> tuple[list[str], str]:
    """Read maps in chunks until a vLLM extension shows (then stop) or ``limit`` bytes were read.
    Returns (paths, how): how is ``read``, ``truncated`` (the limit cut the read short), ``denied``
    (not ours to read: another user's process without root) or ``gone``. Lines are parsed only in
    chunks that name a ``/vllm/`` directory at all: most candidates are other torch processes whose
    thousands of lines would otherwise cost more to split than to read."""
    got, tail = 0, b""
    try:
        with open(maps, "rb") as fh:
            while got < limit:
                chunk = fh.read(min(MAPS_CHUNK, limit - got))
                if not chunk:
                    return [], "read"
                got += len(chunk)
                lines, _, rest = (tail + chunk).rpartition(b"\n")
                found = extensions_in(lines.decode("utf-8", "replace")) if b"/vllm/" in lines else []
                if found:
                    return found[:4], "read"
                tail = rest
    except PermissionError:
        return [], "denied"
    except OSError:
        return [], "gone"
    found = extensions_in(tail.decode("utf-8", "replace"))[:4]
    return found, "read" if found else "truncated"


def gpu_device_fds(fd_dir: Path) -> list[str] | None:
    """Distinct ``/dev/nvidia*`` files held open (None: fds not readable)."""
    try:
        names = os.listdir(fd_dir)[:MAX_FDS]
    except OSError:
        return None
    out: set[str] = set()
    for name in names:
        target = readlink(f"{fd_dir}/{name}")
        if target and target.startswith("/dev/nvidia"):
            out.add(target)
    return sorted(out)[:16]


def io_counters(text: str | None) -> dict[str, int] | None:
    """/proc/<pid>/io: bytes and calls of read/write. A script's own output (LLM.generate's tqdm bar on
    stderr) is the only counter an in-process engine has: no /metrics, no rings."""
    out = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key in ("rchar", "wchar", "syscr", "syscw") and value.strip().isdigit():
            out[key] = int(value)
    return out or None


def candidates(table: dict[int, dict[str, Any]], skip: set[int]) -> list[int]:
    """Python processes not selected otherwise, largest first (vLLM's kernels, torch and CUDA weigh
    hundreds of MB; a small helper script is the least likely engine)."""
    pids = [pid for pid, row in table.items() if pid not in skip and is_python(row.get("argv") or [])
            and (row["stat"].vsize_bytes or MIN_VSIZE_BYTES) >= MIN_VSIZE_BYTES]
    pids.sort(key=lambda pid: (-table[pid]["stat"].rss_pages, pid))
    return pids[:MAX_CANDIDATES]


def evidence(proc_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """The in-process evidence of one Python process (None when it maps no vLLM extension), and how
    its maps were read (see ``mapped_extensions``)."""
    found, how = mapped_extensions(proc_dir / "maps")
    if not found:
        return None, how
    # The maps read above already said "denied" (io has maps' ptrace rule): a miss here is only no counters.
    io_text = read_text(proc_dir / "io")
    return {"selected_as": "vllm_mapped", "vllm_extensions": found, "gpu_fds": gpu_device_fds(proc_dir / "fd"),
            "io": io_counters(io_text)}, how


def scan(pids: list[int], proc_dir: Callable[[int], Path], budget_s: float = SCAN_BUDGET_S
         ) -> dict[int, tuple[dict[str, Any] | None, str]]:
    """``evidence`` of each pid, read in parallel; pids not reached within ``budget_s`` get (None, ``unchecked``)."""
    if not pids:
        return {}
    pool = ThreadPoolExecutor(max_workers=min(SCAN_THREADS, len(pids)), thread_name_prefix="inproc-scan")
    futures = {pid: pool.submit(evidence, proc_dir(pid)) for pid in pids}
    wait(list(futures.values()), timeout=budget_s)
    pool.shutdown(wait=False, cancel_futures=True)  # a read in flight ends on its own (bounded by MAPS_LIMIT)
    return {pid: f.result() if f.done() and not f.cancelled() else (None, "unchecked") for pid, f in futures.items()}
