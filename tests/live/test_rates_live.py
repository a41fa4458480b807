"""--rates observes longer and reports rates: moving under load, still when hung."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from vllmdiag.api import TriageResult, triage
from vllmdiag.model import Finding

sim = pytest.importorskip("vllmdiag_sim.deployment")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root")


def _codes(result: TriageResult, code: str) -> list[Finding]:
    return [f for f in result.report.findings if f.code == code]


@needs_root
def test_watch_reports_rates_under_load_and_stillness_when_hung() -> None:
    with sim.Deployment.up(tp=2, fault="healthy-load") as dep:
        start = time.monotonic()
        res = triage(pids=[dep.root_pid], options={"watch_s": 1.5}, budget_s=10)
        assert time.monotonic() - start >= 1.5  # it really watched
        assert res.report.verdict.status == "healthy"
        tput = _codes(res, "client.token_rates")
        assert tput and tput[0].evidence["tokens_per_s"] > 0
        assert any(not f.evidence["still"] for f in _codes(res, "queue.ring_rates"))
    with sim.Deployment.up(tp=2, fault="straggler", rank=1) as dep:
        res = triage(pids=[dep.root_pid], options={"watch_s": 1.0}, budget_s=10)
        assert res.report.verdict.layer == "gpu"
        activity = _codes(res, "queue.ring_rates")
        assert activity and all(f.evidence["still"] for f in activity)


def test_watch_flag_is_bounded_on_the_cli() -> None:
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "triage", "--watch", "-1"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
