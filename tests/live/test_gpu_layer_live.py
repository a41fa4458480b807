"""The live tests of tests/unit/test_gpu_layer.py, which says what they check: these start something."""

from __future__ import annotations

import pytest
from test_gpu_layer import fake_rank, spec  # noqa: F401 - shared with the pure half

assert spec and spec.loader

spec.loader.exec_module(fake_rank)

# ---- simulator, end to end --------------------------------------------------------------------------
sim = pytest.importorskip("vllmdiag_sim.deployment")


@pytest.mark.slow
@pytest.mark.parametrize(("fault", "rank", "code"), [("straggler", 2, "gpu.rank_straggler"),
                                                    ("collective-mismatch", 1, "gpu.collective_mismatch")])
def test_sim_rank_faults_name_the_rank(fault: str, rank: int, code: str) -> None:
    from vllmdiag.api import triage

    with sim.Deployment.up(tp=4, fault=fault, rank=rank) as d:
        res = triage(pids=[d.root_pid])
    v = res.report.verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary
    assert v.culprits[0].rank == rank and any(f.code == code for f in res.report.findings)


@pytest.mark.slow
def test_sim_idle_deployment_is_healthy() -> None:
    from vllmdiag.api import triage

    with sim.Deployment.up(tp=2) as d:
        res = triage(pids=[d.root_pid])
    assert res.report.verdict.status == "healthy", res.report.verdict.summary
