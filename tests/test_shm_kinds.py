"""One list of what vLLM leaves in /dev/shm, for every command (issue 33, item 3).

A node holding what `kill -9` of a whole TP=2 group left (real-vllm-cpu.md: the four `psm_*` rings, the
CPU all-reduce buffers, multiprocessing's `sem.mp-*`; plus the 0.16 spelling of a buffer, named after the
TCP port): triage's `queue.shm_leaked` and the gate's `shm_leaks` must list exactly the same segments.
Real files with vLLM's names and sizes (sparse: no memory) in the tmpfs /dev/shm of a private node (pid, net
and mount namespaces, as tests/test_gate_e2e.py makes one), where both commands run as a user would run
them: the machine's /dev/shm is never touched, and the node's files vanish with it.
"""

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

from vllmdiag.gate.checks.shm import check_shm_leaks
from vllmdiag.gate.config import GateConfig
from vllmdiag.vocab.shm_names import KINDS, classify_name, describe, is_leftover, leftovers

MiB = 1 << 20
UUID = "2369e0fa7d8342e89d2c398d64002fb7"
# What a killed TP=2 vllm-cpu 0.32 run left (names' shapes and sizes as seen live, 2026-12-05: a real
# `vllm serve` in a private /dev/shm, kill -9 of its group), and a 0.16 run's buffer beside them.
CPUSHM_BYTES = 4194560  # 4 MiB + 256 B per rank, as stat() showed them
LEFT = {
    "psm_1a2b3c4d": 167772190,  # rpc broadcast ring: (16 MiB + 1 + 2 readers) x 10
    "psm_5e6f7a8b": 251658260,  # TP0's response ring: (24 MiB + 1 + 1) x 10
    "psm_9c0d1e2f": 251658260,  # TP1's response ring
    "psm_3a4b5c6d": 25165836,  # TP0 -> TP1 broadcaster: (4 MiB + 1 + 1) x 6
    f"vllm_dist_{UUID}-tp:0-[0-1]-cpushm_0": CPUSHM_BYTES,
    f"vllm_dist_{UUID}-tp:0-[0-1]-cpushm_1": CPUSHM_BYTES,
    "49889-tp:0-[0-1]-cpushm_0": CPUSHM_BYTES,  # vLLM 0.16: VLLM_DIST_IDENT is the init method's TCP port
    "sem.mp-k3j_9x2q": 32,
}
# Present, yet no leftover of vLLM: another program's SharedMemory (no ring's size), a creator between
# shm_open and ftruncate, another library's semaphore, and a buffer a live process (this one) maps.
NOT_LEFT = {"psm_0000f00d": 602112, "psm_00000000": 0, "sem.loky-abc123": 32}
MAPPED = f"vllm_dist_{UUID}-pp:0-[0-1]-cpushm_0"


def test_names_classify_to_the_one_list() -> None:
    kinds = {n: classify_name(n) for n in LEFT}
    assert kinds == {**{n: "psm" for n in LEFT if n.startswith("psm_")},
                     **{n: "vllm_cpushm" for n in LEFT if "cpushm" in n}, "sem.mp-k3j_9x2q": "mp_semaphore"}
    assert classify_name("sem.loky-abc123") == "semaphore" and classify_name("vllm_dist_notabuffer") == "other"
    assert classify_name("49889-notabuffer") == "other"
    assert all(k in KINDS for k in kinds.values())
    assert describe({"name": "psm_1a2b3c4d", "kind": "psm", "size_bytes": 167772190}) == "vLLM ring 16 MiB x 10, 2 reader(s)"


def test_a_snapshot_written_before_a_kind_was_known_is_read_by_name() -> None:
    seg = {"name": "49889-tp:0-[0-1]-cpushm_1", "kind": "other", "size_bytes": 4 * MiB, "age_s": 60,
           "mapped_by": [], "mapped_by_other": []}
    sem = {**seg, "name": "sem.mp-abcdefgh", "kind": "semaphore", "size_bytes": 32}
    assert [s["kind"] for s in leftovers([seg, sem])] == ["vllm_cpushm", "mp_semaphore"]
    assert not is_leftover({**seg, "mapped_by": [7]}) and not is_leftover({**seg, "mapped_by_other": [8]})


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


def test_the_gate_is_unsure_where_triage_is() -> None:
    """Maps it could not read: both list the same segments, neither calls them surely leaked."""
    from vllmdiag.analysis.facts import Facts
    from vllmdiag.analysis.layers.queue.ring_flow import analyze as queue_analyze
    from vllmdiag.model import Snapshot

    segs = [{"name": n, "path": f"/dev/shm/{n}", "kind": classify_name(n), "size_bytes": s, "allocated_bytes": 4096,
             "age_s": 600.0, "mapped_by": [], "mapped_by_other": []} for n, s in LEFT.items()]
    snap = Snapshot.from_dict({"schema_version": 1, "node": "n1", "probes": {
        "processes": {"status": "ok", "data": {"processes": []}},
        "shm": {"status": "ok", "data": {"segments": segs, "roots": [], "unreadable_other_pids": 3}}}})
    (leak,) = [f for f in queue_analyze(Facts(snap, [])) if f.code == "queue.shm_leaked"]
    gate = check_shm_leaks(snap, GateConfig())
    assert leak.severity == "info" and "Unsure" in leak.message and not leak.culprits
    assert gate.status == "warn" and "unsure" in gate.reason and gate.numbers["unreadable_maps"] == 3
    assert [s["name"] for s in leak.evidence["segments"]] == [s["name"] for s in gate.numbers["segments"]]
