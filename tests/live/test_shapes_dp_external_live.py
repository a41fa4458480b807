"""The live tests of tests/unit/test_shapes_dp_external.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

# ---- live: the simulator's dp-external shape ----------------------------------------------------------
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root to read the simulator's stacks")


@needs_root
@pytest.mark.parametrize("fault", ["healthy", "dp-out-of-step"])
def test_dp_external_live_and_from_the_saved_snapshot(fault: str, tmp_path: Path) -> None:
    from vllmdiag.api import analyze_files, triage
    from vllmdiag_sim.deployment import Deployment

    with Deployment.up(tp=2, dp=2, fault=fault, rank=1 if fault != "healthy" else None, shape="dp-external") as dep:
        roots = sorted(p["pid"] for p in dep.processes if p["role"] == "api_server")
        assert len(roots) == 2
        result = triage(pids=roots, budget_s=8, confirm_s=5.0)
        v = result.report.verdict
        path = tmp_path / "snap.json"
        path.write_text(json.dumps(result.report.snapshots[0].to_dict()))
        assert analyze_files([path], roots).report.verdict.to_dict() == v.to_dict()
        if fault == "healthy":
            assert v.status == "healthy", v.summary
            return
        assert (v.status, v.layer) == ("blocked", "gpu"), v.summary
        assert (v.culprits[0].role, v.culprits[0].pid) == ("engine_core", dep.engine_pid(dp_rank=1))
