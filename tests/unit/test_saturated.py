"""The pure tests of tests/live/test_saturated_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from vllmdiag.context import Context
from vllmdiag.probe import ProbeSpec
from vllmdiag.registry import Probe
from vllmdiag.runtime.runner import collect_snapshot


def _sleeper(seconds: float) -> Probe:
    def collect(ctx: Context) -> dict[str, Any]:
        time.sleep(seconds)
        return {"slept": seconds}
    return Probe(ProbeSpec(name="slow", layer="host", description="slow", timeout_s=0.3), collect)


def test_per_probe_deadlines_grow_with_the_budget() -> None:
    assert collect_snapshot(Context(), probes=["slow"], registry={"slow": _sleeper(0.6)},
                            budget_s=8).probes["slow"].status == "timeout"
    assert collect_snapshot(Context(), probes=["slow"], registry={"slow": _sleeper(0.6)},
                            budget_s=24).probes["slow"].status == "ok"  # 0.3 s x 24/8


def test_a_report_written_past_the_budget_gives_way_to_the_verdict_alone(capsys: pytest.CaptureFixture[str]) -> None:
    from test_progress import _snap

    from vllmdiag.analysis.bisect import analyze
    from vllmdiag.api import TriageResult
    from vllmdiag.cli.shared import emit

    class Slow(TriageResult):
        def to_json(self) -> str:
            time.sleep(5)  # a starved node: the full report takes longer than the budget left
            return "{}"

    result = Slow(analyze([_snap("a")]))
    start = time.monotonic()
    code = emit(result, True, None, by=start + 0.2)
    out = json.loads(capsys.readouterr().out)
    assert time.monotonic() - start < 0.2 + 2.5 and code == 0  # never the 5 s the full report would take
    assert out["verdict"]["status"] == "healthy" and "budget" in out["cut"]
