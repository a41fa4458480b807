"""The live tests of tests/unit/test_run_stages.py, which says what they check: these start something."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from vllmdiag import api
from vllmdiag.model import Report, Verdict
from vllmdiag.runtime.run import Run


def test_triage_runs_its_stages_in_order_and_stops_at_the_first_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [name for name, _ in api.TRIAGE_STAGES] == ["start-up", "quick pass", "second look", "analysis",
                                                        "confirm window"]
    ran: list[str] = []
    stop = Report(verdict=Verdict(status="inconclusive", summary="stopped"), deployments=[], findings=[], snapshots=[])

    def stage(name: str) -> Callable[[object], Report | None]:
        def run(t: object) -> Report | None:
            ran.append(name)
            return stop if name == "quick pass" else None
        return run

    monkeypatch.setattr(api, "TRIAGE_STAGES", tuple((n, stage(n)) for n, _ in api.TRIAGE_STAGES))
    result = api.triage(run=Run(budget_s=1.0))
    assert result.report is stop and ran == ["start-up", "quick pass"]
