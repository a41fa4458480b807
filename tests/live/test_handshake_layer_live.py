"""The live tests of tests/unit/test_handshake_layer.py, which says what they check: these start something."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.api import triage

from sim_fixtures import sim_state  # noqa: F401

sim = pytest.importorskip("vllmdiag_sim.deployment")


@pytest.mark.slow
def test_sim_endpoint_gone_blames_the_api_server(sim_state: Path) -> None:  # noqa: F811
    with sim.Deployment.up(tp=2, fault="endpoint-gone") as dep:
        report = triage(pids=[dep.root_pid]).report
        v = report.verdict
        assert (v.status, v.layer) == ("blocked", "handshake"), v.summary
        assert v.culprits[0].pid == dep.root_pid and v.culprits[0].role == "api_server"


@pytest.mark.slow
def test_sim_healthy_with_a_stale_socket_file_is_healthy(sim_state: Path) -> None:  # noqa: F811
    rpc = Path(os.environ["VLLM_RPC_BASE_PATH"])
    stale = rpc / str(uuid.uuid4())
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(stale))
    s.close()
    try:
        with sim.Deployment.up(tp=2) as dep:
            report = triage(pids=[dep.root_pid]).report
            assert report.verdict.status == "healthy", report.verdict.summary
            [f] = [f for f in report.findings if f.code == "handshake.stale_socket_files"]
            assert f.severity == "info" and str(stale) in f.evidence["newest"]
    finally:
        stale.unlink()


@pytest.mark.slow
def test_sim_healthy_with_a_cpu_hog_beside_it_stays_healthy(sim_state: Path, cpu_hog: Any,  # noqa: F811
                                                            reliability: Any) -> None:
    """Issue 15 item 15: under load a slow greeting must not become a handshake finding."""
    with sim.Deployment.up(tp=2) as dep:
        verdicts = [triage(pids=[dep.root_pid], budget_s=8).report for _ in range(2)]
    reliability.case()
    for report in verdicts:
        assert report.verdict.status == "healthy", report.verdict.summary
        assert not [f.code for f in report.findings if f.layer == "handshake" and f.severity != "info"]
