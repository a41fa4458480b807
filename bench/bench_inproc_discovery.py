"""Cost of finding in-process engines (offline LLM() at TP=1, no vLLM title) on a busy node.

The processes probe reads /proc/<pid>/maps of untitled Python processes (bounded, early exit) to
find vLLM's compiled kernels. This starts enough processes to reach ~300 on the node (a mix of
Python interpreters with some C extensions loaded, and plain `sleep`s, plus one Python mapping a
file named like vLLM's extension) and compares the processes probe with and without that scan.
Reported as a ratio and medians; never asserted in tests.

    python bench/bench_inproc_discovery.py [--total 300] [--pythons 60] [--runs 15] [--heavy]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from vllmdiag.context import Context
from vllmdiag.probes import _inproc, processes

PY_IDLE = "import ssl, sqlite3, ctypes, decimal, json, time; time.sleep(600)"
# --heavy: every interpreter looks like a torch/CUDA process that is not vLLM (GBs of virtual size,
# ~3,000 maps lines): the scan must read all of its maps. The worst case for the scan.
PY_HEAVY = ("import mmap, tempfile, time\n"
            "big = mmap.mmap(-1, 2 << 30, prot=mmap.PROT_READ, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
            "f = tempfile.TemporaryFile(); f.truncate(4096 * 6000)\n"
            "maps = [mmap.mmap(f.fileno(), 4096, offset=4096 * i, prot=mmap.PROT_READ) for i in range(0, 6000, 2)]\n"
            "time.sleep(600)\n")
MAPPER = ("import mmap, sys, time\nwith open(sys.argv[1], 'rb') as fh:\n"
          "    keep = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)\n"
          "torch_and_cuda = mmap.mmap(-1, 2 << 30, prot=mmap.PROT_READ,\n"
          "                           flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n"
          "time.sleep(600)\n")


def _once(scan: bool) -> float:
    ctx = Context()
    start = time.perf_counter()
    if scan:
        processes.collect(ctx)
    else:
        with mock.patch.object(_inproc, "candidates", lambda table, skip: []):
            processes.collect(ctx)
    return time.perf_counter() - start


def _timed(runs: int) -> tuple[list[float], list[float]]:
    """Alternating runs, so a load change on the machine hits both sides alike."""
    without, with_scan = [], []
    for _ in range(runs):
        without.append(_once(False))
        with_scan.append(_once(True))
    return without, with_scan


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--total", type=int, default=300)
    ap.add_argument("--pythons", type=int, default=60)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--heavy", action="store_true", help="interpreters with torch-sized maps (worst case)")
    args = ap.parse_args()
    have = sum(1 for n in os.listdir("/proc") if n.isdigit())
    tmp = Path(tempfile.mkdtemp(prefix="inproc-bench-"))
    ext = tmp / "site-packages" / "vllm" / "_C_stable_libtorch.abi3.so"
    ext.parent.mkdir(parents=True)
    ext.write_bytes(b"placeholder")
    extra = max(0, args.total - have - 1)
    pys = min(args.pythons, extra)
    procs = [subprocess.Popen([sys.executable, "-c", PY_HEAVY if args.heavy else PY_IDLE]) for _ in range(pys)]
    procs += [subprocess.Popen(["sleep", "600"]) for _ in range(extra - pys)]
    procs.append(subprocess.Popen([sys.executable, "-c", MAPPER, str(ext)],
                                  env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}))
    try:
        time.sleep(2.0)  # let the interpreters finish importing
        data = processes.collect(Context())
        found = [p["pid"] for p in data["processes"] if p.get("selected_as") == "vllm_mapped"]
        lines = [len(Path(f"/proc/{p.pid}/maps").read_text().splitlines()) for p in procs[:pys] if p.poll() is None]
        without, with_scan = _timed(args.runs)
        a, b = statistics.median(without), statistics.median(with_scan)
        print(f"processes on the node: {data['pid_count']} (python interpreters started: {pys + 1}, alive "
              f"{len(lines)}, median maps lines {statistics.median(lines) if lines else 0:.0f}; scanned "
              f"{data['inprocess_scan'].get('candidates')}, unchecked {len(data['inprocess_scan'].get('unchecked_pids') or [])})")
        print(f"in-process engines found: {len(found)} (expected pid {procs[-1].pid} among {found})")
        print(f"processes probe without the scan: median {a * 1000:.1f} ms")
        print(f"processes probe with the scan:    median {b * 1000:.1f} ms  (ratio {b / a:.2f}x, "
              f"+{(b - a) * 1000:.1f} ms)")
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=10)
        ext.unlink()
        for d in (ext.parent, ext.parent.parent, tmp):
            d.rmdir()


if __name__ == "__main__":
    main()
