"""A flooded /dev/shm must not hide the live rings (issue 15, item 5).

The deployment runs as a namespaced node (private mount namespace, its own tmpfs /dev/shm), and the
5,000 junk psm_* files go into that private tmpfs through /proc/<pid>/root: the real /dev/shm of this
shared machine is never touched, and the junk vanishes with the namespace. The junk has the real
rpc ring's size (sparse: no memory), so it competes for both the listing cap and the decode cap.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from sim_fixtures import sim_state  # noqa: F401

sim = pytest.importorskip("vllmdiag_sim.deployment")

pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(os.geteuid() != 0, reason="needs root (unshare, py-spy)")]
JUNK = 5000


def _flood(shm_dir: str, size: int) -> None:
    for i in range(JUNK):
        fd = os.open(f"{shm_dir}/psm_{i:08x}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)


def test_junk_psm_flood_does_not_hide_the_live_rings(sim_state: Path, reliability: Any) -> None:  # noqa: F811
    from vllmdiag.api import triage

    with sim.Deployment.up(tp=2, namespace=True) as dep:
        shm_dir = f"/proc/{dep.root_pid}/root/dev/shm"
        real = sorted(os.listdir(shm_dir))
        size = max(os.path.getsize(f"{shm_dir}/{n}") for n in real)
        _flood(shm_dir, size)
        assert len(os.listdir(shm_dir)) >= JUNK  # the flood is real
        start = time.monotonic()
        result = triage(pids=[dep.root_pid], budget_s=8)
        elapsed = time.monotonic() - start
        pids = {p["pid"] for p in dep.processes}
    reliability.case(hang=elapsed > 12)
    report = result.report
    v = report.verdict
    snap = report.snapshots[0]
    rings = {r["name"]: r for r in snap.data("rings")["rings"]}
    assert real and set(real) <= set(rings), (real, sorted(rings)[:5])  # every live ring decoded
    assert all(set(rings[n]["mapped_by"]) & pids for n in real)
    # The deployment itself is healthy (no junk read as its rings); ring-sized junk no process maps
    # is, honestly, a node-level leak.
    assert [d.verdict.status for d in report.deployments] == ["healthy"], v.summary
    assert v.status in ("healthy", "degraded") and v.layer in (None, "queue"), v.summary
    skipped = snap.data("shm")["skipped"]
    assert skipped and skipped[0]["count"] > 0 and "vLLM" in skipped[0]["reason"]
    assert snap.data("rings")["skipped"]["count"] > 0 and snap.data("rings")["skipped"]["mapped_by_vllm"] == 0
    info = [f for f in report.findings if f.code == "queue.shm_entries_skipped"]
    assert info and info[0].severity == "info" and "not examined" in info[0].message
