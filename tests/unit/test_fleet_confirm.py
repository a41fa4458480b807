"""The pure tests of tests/live/test_fleet_confirm_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import pytest

from vllmdiag.sweep.fanout import SweepPlan, fit_confirm
from vllmdiag.sweep.transport import Transport, remote_argv


def test_window_goes_to_the_nodes_and_stretches_only_a_default_deadline() -> None:
    assert "--confirm" not in remote_argv(Transport(), "n1", 8.0)  # 0: an older collect still answers
    assert remote_argv(Transport(confirm_s=10), "n1", 8.0)[-2:] == ["--confirm", "10.0"]
    plan = SweepPlan(nodes=["n1", "n2"], transport=Transport(confirm_s=10), timeout_s=20)
    assert (plan.node_timeout_s, plan.deadline_s) == (30, 32)
    assert fit_confirm(10, 20, None) == 10  # no --sweep-timeout: the deadline grows instead
    assert fit_confirm(10, 20, 25) == 4.0 and fit_confirm(10, 20, 21) == 0.0  # a given deadline is kept
    from vllmdiag.cli.options import SWEEP, check  # --confirm's one range check is the option table's

    with pytest.raises(Exception, match="--confirm must be between 0 and 600 seconds"):
        check(SWEEP, {"confirm": -1})
