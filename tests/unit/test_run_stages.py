"""The run object (vllmdiag/runtime/run.py) and triage as its declared stages (api.TRIAGE_STAGES)."""

from __future__ import annotations

import time

import pytest

from vllmdiag.runtime import deadline
from vllmdiag.runtime.run import LATE_COLLECT_S, RENDER_S, Run


def test_an_unguarded_run_counts_from_now_and_is_never_cut() -> None:
    run = Run(budget_s=8.0, confirm_s=10.0)
    assert not run.guarded and run.analysis_cut() is None and run.window_analysis_cut() is None
    assert run.begin() < 0.5 and not run.start_took_it_all()
    assert run.window_end() == pytest.approx(run.started + 10.0)
    assert run.collect_until() == pytest.approx(run.started + 8.0 - deadline.AFTER_S)


def test_a_guarded_run_whose_start_took_the_budget_starts_late_with_a_short_collector() -> None:
    run = Run(budget_s=2.0, confirm_s=0.0, origin=time.monotonic() - 3.0)  # as if the process began 3 s ago
    assert run.begin() >= 3.0 and run.start_took_it_all()
    assert run.collector_budget() == deadline.MIN_COLLECT_S  # nothing left of the budget
    run.start_late()
    assert run.collector_budget() == pytest.approx(LATE_COLLECT_S, abs=0.05)
    cut = run.analysis_cut()
    assert cut is not None and cut == pytest.approx(run.started + 2.0 + deadline.LAST_WORD_S - RENDER_S)
