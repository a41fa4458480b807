"""The live tests of tests/unit/test_queue_grammar.py, which says what they check: these start something."""

from __future__ import annotations

import os

import pytest

from vllmdiag.api import triage


# ---- live: the simulator's EngineCore (vLLM 0.33's frames), real py-spy ----------------------------------
@pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root to read the simulator's stacks")
def test_live_stuck_compile_is_named_and_a_finishing_one_is_not() -> None:
    sim = pytest.importorskip("vllmdiag_sim.deployment")
    with sim.Deployment.up(tp=2, fault="grammar-stuck") as dep:
        report = triage(pids=[dep.root_pid], budget_s=8, confirm_s=5.0).report
        (f,) = [f for f in report.findings if f.code == "queue.grammar_stuck"]
        assert f.severity == "critical" and f.evidence["thread"].startswith("ThreadPoolExecutor-")
        assert f.evidence["backend"] == "xgrammar" and "compile_json_schema" in f.evidence["frame"]
        assert report.verdict.culprits[0].pid == dep.engine_pid()
        # the rings kept moving (empty steps): only the grammar rule kept the window open
        assert report.snapshots[0].options["confirm"]["stopped"] == "window"
        assert all(f.severity == "info" for f in report.findings if f.code.startswith("client."))
    with sim.Deployment.up(tp=2, fault="grammar-load") as dep:
        report = triage(pids=[dep.root_pid], budget_s=8, confirm_s=5.0).report
        assert report.verdict.status == "healthy", report.verdict.summary
        (f,) = [f for f in report.findings if f.code == "queue.grammar_stuck"]  # the compile was seen ...
        assert f.severity == "info" and f.evidence["looks"] >= 2  # ... looked at again, and it finished
