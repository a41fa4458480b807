"""The live tests of tests/unit/test_shapes_inproc.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vllmdiag.analysis.bisect import analyze
from vllmdiag.analysis.views.deployments import find_deployments
from vllmdiag.model import Snapshot

# ---- live: real processes, the real processes probe, py-spy ------------------------------------
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root to read another process's stack")
MAPPER = """
import mmap, sys, time
with open(sys.argv[1], "rb") as fh:
    keep = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
torch_and_cuda = mmap.mmap(-1, 2 << 30, prot=mmap.PROT_READ, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
open(sys.argv[2], "w").close()
time.sleep(120)
"""


@pytest.fixture()
def pythons(tmp_path: Path) -> Iterator[dict[str, int]]:
    ext = tmp_path / "site-packages" / "vllm" / "_C_stable_libtorch.abi3.so"
    ext.parent.mkdir(parents=True)
    ext.write_bytes(b"placeholder")
    env = {k: v for k, v in os.environ.items() if not k.startswith("VLLM_")}
    specs = {"engine": ([sys.executable, "-c", MAPPER, str(ext), str(tmp_path / "engine")],
                        {**env, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}),
             "kernels_only": ([sys.executable, "-c", MAPPER, str(ext), str(tmp_path / "kernels_only")], env),
             # `pip download vllm`: vllm in its argv, nothing of vLLM in its memory
             "pip_like": ([sys.executable, "-c", "import time; time.sleep(120)", "pip", "download", "vllm==0.33.0"], env),
             "plain": ([sys.executable, "-c", "import time; time.sleep(120)"], env)}
    procs = {name: subprocess.Popen(argv, env=e, stdin=subprocess.DEVNULL) for name, (argv, e) in specs.items()}
    try:
        deadline = time.monotonic() + 20
        while not all((tmp_path / n).exists() for n in ("engine", "kernels_only")) and time.monotonic() < deadline:
            time.sleep(0.02)
        yield {name: p.pid for name, p in procs.items()}
    finally:
        for p in procs.values():
            p.kill()
            p.wait(timeout=10)


@needs_root
def test_live_probe_records_the_evidence_and_only_the_engine_is_a_deployment(pythons: dict[str, int]) -> None:
    from vllmdiag.api import triage

    result = triage(pids=list(pythons.values()), budget_s=8, confirm_s=0)
    snap = result.report.snapshots[0]
    rows = {p["pid"]: p for p in snap.data("processes")["processes"]}
    assert rows[pythons["engine"]]["selected_as"] == "vllm_mapped"
    assert rows[pythons["engine"]]["vllm_extensions"][0].endswith("/vllm/_C_stable_libtorch.abi3.so")
    assert rows[pythons["engine"]]["environ"].get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0"
    assert isinstance(rows[pythons["engine"]]["io"]["wchar"], int)  # its only progress counter
    assert pythons["pip_like"] not in rows and pythons["plain"] not in rows
    assert any(d.get("pid") == pythons["engine"] and d.get("status") == "ok" for d in snap.data("stacks")["dumps"])
    assert [d.root_pid for d in result.report.deployments] == [pythons["engine"]]
    deps = find_deployments(snap)  # the whole node (other deployments may run on it): ours only
    assert [d.kind for d in deps if d.root_pid == pythons["engine"]] == ["offline_inprocess"]
    assert not {pythons[n] for n in ("kernels_only", "pip_like", "plain")} & {p for d in deps for p in d.pids}
    assert result.report.verdict.status == "healthy", result.report.verdict.summary
    again = analyze([Snapshot.from_dict(json.loads(json.dumps(snap.to_dict())))], set(pythons.values()))
    assert again.verdict.to_dict() == result.report.verdict.to_dict()


@needs_root
def test_live_unrelated_pythons_are_no_deployment(pythons: dict[str, int]) -> None:
    from vllmdiag.api import triage

    result = triage(pids=[pythons["kernels_only"], pythons["pip_like"], pythons["plain"]], budget_s=8, confirm_s=0)
    assert result.report.verdict.status == "no-deployment", result.report.verdict.summary
