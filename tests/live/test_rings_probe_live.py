"""The rings probe on real /dev/shm files held mapped by real, vLLM-titled child processes.

Segments get unique `psm_<8 hex>` names and are always removed; every process tree is killed
with its process group. Titles use a per-test prefix (Context.title_prefix), so deployments that
other tests run on this machine at the same time never mix into these results.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_rings_probe import DEV_SHM, RINGS, collect, deployment_spec, segments_fixture  # noqa: F401 - shared with the pure half

from vllmdiag.context import Context
from vllmdiag.model import Snapshot
from vllmdiag.runtime.runner import collect_snapshot

FAKE = RINGS / "fakevllm.py"


@pytest.fixture(name="tree")
def tree_fixture() -> Iterator[Callable[..., dict[str, Any]]]:
    """Factory for a titled process tree (fakevllm.py); returns {"prefix", "pid", "pids": {title: pid}}."""
    started: list[subprocess.Popen[bytes]] = []

    def start(spec: dict[str, Any]) -> dict[str, Any]:
        prefix = "Q" + secrets.token_hex(3).upper()
        proc = subprocess.Popen([sys.executable, str(FAKE), json.dumps({"prefix": prefix, **spec})],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"READY"
        return {"prefix": prefix, "pid": proc.pid, "pids": titles(prefix)}

    yield start
    for proc in started:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def titles(prefix: str) -> dict[str, int]:
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                head = (entry / "cmdline").read_bytes().split(b"\0")[0].decode(errors="replace").strip()
            except OSError:
                continue
            if head.startswith(prefix + "::"):
                out[head[len(prefix) + 2:]] = int(entry.name)
    return out


def ring(snap: Snapshot, path: Path) -> dict[str, Any]:
    return next(r for r in snap.data("rings")["rings"] if r["name"] == path.name)


def test_real_fixtures_mapped_by_a_titled_tree(segments, tree) -> None:
    rpc, resp, bcast = (segments(f) for f in ("rpc-tp4-reader2-stuck", "response-3-unread",
                                               "tp-broadcaster-3readers-2read"))
    t = tree(deployment_spec(rpc, resp, bcast))
    snap = collect(t["prefix"])
    assert snap.status("rings") == "ok", snap.probes["rings"].reason
    pids = t["pids"]
    r = ring(snap, rpc)
    assert r["geometry"] == {"max_chunks": 10, "max_chunk_bytes": 16 << 20, "n_reader": 4}
    assert r["format"] == "new"
    assert sorted(r["mapped_by"]) == sorted(pids.values())
    assert r["stable_unread"] == [0, 0, 10, 0] and r["full"] and r["blocked_on"] == [2]
    assert r["moved"] is False and r["last_method"] == "execute_model"
    assert r["sample_count"] >= 2 and r["window_s"] >= 0.09
    assert r["samples"][0]["flags"] == " ".join(["11101"] * 10)
    r = ring(snap, resp)
    assert sorted(r["mapped_by"]) == sorted([pids["EngineCore"], pids["Worker_TP0"]])
    assert r["stable_unread"] == [3] and not r["full"] and r["writer_index"] == 3 and r["last_status"] == "SUCCESS"
    r = ring(snap, bcast)
    assert r["geometry"]["n_reader"] == 3 and r["stable_unread"] == [0, 0, 0] and r["writer_index"] == 2


def test_flags_that_change_between_samples_are_not_stable(segments, tree) -> None:
    bcast = segments("tp-broadcaster-3readers-2read")
    meta = (4 << 20) * 6
    # Toggle reader 0's read flag of slot 0 every 30 ms: the ring moves, reader 0 is not stable.
    t = tree({"title": "Worker_TP0", "maps": [str(bcast)], "flip": [str(bcast), meta + 1, 0.03],
              "children": [{"title": f"Worker_TP{r}", "maps": [str(bcast)]} for r in (1, 2, 3)]})
    r = ring(collect(t["prefix"], watch_s=0.4), bcast)
    assert r["moved"] is True
    assert r["stable_unread"][0] is None and r["stable_unread"][1:] == [0, 0]
    assert r["sample_count"] >= 4 and r["window_s"] >= 0.3
    assert sum("flags" in s for s in r["samples"]) >= 2  # flags kept only when they changed


def test_non_vllm_psm_segments_are_rejected_and_unmapped_rings_kept(segments, tree) -> None:
    dataloader = segments(data=os.urandom(64 << 10), size=8 * 3 * 224 * 224 * 4)
    solvable_noise = segments(data=b"", size=(16 << 20) + 6)
    with open(solvable_noise, "r+b") as f:  # metadata region full of non-flag bytes
        f.seek(16 << 20)
        f.write(b"\x07" * 6)
    leaked = segments("response-3-unread")
    t = tree({"title": "EngineCore", "maps": [str(dataloader)]})
    snap = collect(t["prefix"])
    rejected = {r["name"]: r["reason"] for r in snap.data("rings")["rejected"]}
    assert "fits no ring geometry" in rejected[dataloader.name]
    assert "not a vLLM ring" in rejected[solvable_noise.name]
    names = {r["name"] for r in snap.data("rings")["rings"]}
    assert dataloader.name not in names and solvable_noise.name not in names
    r = ring(snap, leaked)
    assert r["mapped_by"] == [] and r["stable_unread"] == [3]


def test_probe_never_modifies_a_segment(segments, tree) -> None:
    bcast = segments("tp-broadcaster-3readers-2read")
    resp = segments("response-3-unread")

    def state() -> list[tuple[str, int, int, int]]:
        out = []
        for p in (bcast, resp):
            st = p.stat()
            out.append((hashlib.sha256(p.read_bytes()).hexdigest() if p == bcast else "", st.st_size,
                        st.st_mtime_ns, st.st_ctime_ns))
        return out

    t = tree({"title": "EngineCore", "maps": [str(resp)],
              "children": [{"title": f"Worker_TP{r}", "maps": [str(bcast)] + ([str(resp)] if r == 0 else [])}
                           for r in range(4)]})
    before, names_before = state(), {p.name for p in DEV_SHM.iterdir() if p.name in (bcast.name, resp.name)}
    snap = collect(t["prefix"])
    assert {r["name"] for r in snap.data("rings")["rings"]} >= {bcast.name, resp.name}
    assert state() == before
    assert {p.name for p in DEV_SHM.iterdir() if p.name in (bcast.name, resp.name)} == names_before
    # The probe holds no fd on the segments once it returned.
    own_fds = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if fd.isdigit()
               if os.path.exists(f"/proc/self/fd/{fd}")]
    assert not any(str(p) in own_fds for p in (bcast, resp))


def test_sampling_overlaps_the_other_probes_and_respects_the_deadline(segments, tree) -> None:
    rpc = segments("rpc-tp4-reader2-stuck")
    t = tree({"title": "EngineCore", "maps": [str(rpc)]})
    start = time.monotonic()
    snap = collect(t["prefix"])
    elapsed = time.monotonic() - start
    r = ring(snap, rpc)
    assert r["sample_count"] >= 2 and r["samples"][1]["t_s"] - r["samples"][0]["t_s"] >= 0.09
    assert elapsed < 1.5  # processes + shm are fast: two samples, then done
    ctx = Context(title_prefix=t["prefix"], options={"watch_s": 30})
    snap = collect_snapshot(ctx, probes=["rings"], budget_s=1.0)
    assert snap.status("rings") == "ok"  # stopped sampling before the budget, result kept
    assert ring(snap, rpc)["sample_count"] >= 2
