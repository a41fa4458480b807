"""The live tests of tests/unit/test_shm_kinds.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_shm_kinds import LEFT, UUID  # noqa: F401 - shared with the pure half

from vllmdiag.gate.checks.shm import check_shm_leaks
from vllmdiag.gate.config import GateConfig
from vllmdiag.vocab.shm_names import classify_name

# Present, yet no leftover of vLLM: another program's SharedMemory (no ring's size), a creator between
# shm_open and ftruncate, another library's semaphore, and a buffer a live process (this one) maps.
NOT_LEFT = {"psm_0000f00d": 602112, "psm_00000000": 0, "sem.loky-abc123": 32}
MAPPED = f"vllm_dist_{UUID}-pp:0-[0-1]-cpushm_0"

# Runs as pid 1 of a private node: its own pid, net and mount namespace with a tmpfs /dev/shm. It leaves
# the killed run's files (an hour old), keeps one buffer mapped by a live process, then runs both commands.
NODE = """
import json, mmap, os, subprocess, sys, time
left, other, mapped = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
old = time.time() - 3600
for name, size in {**left, **other, mapped: 4 << 20}.items():
    with open("/dev/shm/" + name, "wb") as f:
        f.truncate(size)
    os.utime("/dev/shm/" + name, (old, old))
r, w = os.pipe()
holder = os.fork()
if holder == 0:
    with open("/dev/shm/" + mapped, "r+b") as f, mmap.mmap(f.fileno(), 4096):
        os.write(w, b"x")
        time.sleep(120)
    os._exit(0)
os.read(r, 1)
run = [sys.executable, "-m", "vllmdiag"]
out = {}
try:
    for name, args in (("triage", ["triage", "--json", "--confirm", "0", "--no-boost"]), ("gate", ["gate", "--json"])):
        p = subprocess.run(run + args, capture_output=True, text=True, timeout=60)
        out[name] = {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr[-3000:]}
finally:
    os.kill(holder, 9)
print(json.dumps(out))
"""


def _on_a_private_node(tmp_path: Path) -> dict[str, Any]:
    rpc = tmp_path / "rpc"
    rpc.mkdir()
    script = (f"mount -t tmpfs -o size=2g tmpfs /dev/shm && exec {shlex.quote(sys.executable)} -c {shlex.quote(NODE)} "
              f"{shlex.quote(json.dumps(LEFT))} {shlex.quote(json.dumps(NOT_LEFT))} {shlex.quote(MAPPED)}")
    proc = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "--net", "--mount", "--propagation", "private",
                           "sh", "-c", script], capture_output=True, text=True, timeout=150,
                          env={**os.environ, "VLLM_RPC_BASE_PATH": str(rpc)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(json.loads(proc.stdout))


@pytest.mark.timeout(180)
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare (private /dev/shm)")
def test_triage_and_gate_list_the_same_leftovers_of_a_killed_run(tmp_path: Path) -> None:
    out = _on_a_private_node(tmp_path)
    tri, gate = json.loads(out["triage"]["stdout"] or "{}"), json.loads(out["gate"]["stdout"] or "{}")
    assert tri and gate, out
    (leak,) = [f for f in tri["findings"] if f["code"] == "queue.shm_leaked"]
    by_triage = sorted(s["name"] for s in leak["evidence"]["segments"])
    (check,) = [c for c in gate["gate"]["checks"] if c["name"] == "shm_leaks"]
    by_gate = sorted(s["name"] for s in check["numbers"]["segments"])
    assert by_triage == by_gate, set(by_triage) ^ set(by_gate)
    assert by_gate == sorted(LEFT) and check["status"] == "fail" and out["gate"]["rc"] == 1
    kinds = {s["name"]: s["kind"] for s in leak["evidence"]["segments"]}
    assert kinds == {s["name"]: s["kind"] for s in check["numbers"]["segments"]}
    assert kinds["49889-tp:0-[0-1]-cpushm_0"] == "vllm_cpushm" and kinds["sem.mp-k3j_9x2q"] == "mp_semaphore"


def test_both_commands_judge_one_snapshot_alike() -> None:
    """The same shm data through triage's analyzer and the gate's check: same names, same order."""
    from vllmdiag.analysis.facts import Facts
    from vllmdiag.analysis.layers.queue.ring_flow import analyze as queue_analyze
    from vllmdiag.model import Snapshot

    segs = [{"name": n, "path": f"/dev/shm/{n}", "kind": classify_name(n), "size_bytes": s, "allocated_bytes": 4096,
             "age_s": 600.0, "mapped_by": [], "mapped_by_other": []} for n, s in {**LEFT, **NOT_LEFT}.items()]
    snap = Snapshot.from_dict({"schema_version": 1, "node": "n1", "probes": {
        "processes": {"status": "ok", "data": {"processes": []}},
        "shm": {"status": "ok", "data": {"segments": segs, "roots": []}}}})
    (leak,) = [f for f in queue_analyze(Facts(snap, [])) if f.code == "queue.shm_leaked"]
    gate = check_shm_leaks(snap, GateConfig())
    assert [s["name"] for s in leak.evidence["segments"]] == [s["name"] for s in gate.numbers["segments"]]
    assert {s["name"] for s in gate.numbers["segments"]} == set(LEFT)
    assert "4 vLLM ring(s)" in gate.reason and "3 vLLM CPU all-reduce buffer(s)" in leak.message
    assert "1 multiprocessing semaphore(s) (32 B apparent)" in leak.message
    assert "4 vLLM ring(s) (664.0 MiB apparent)" in leak.message
