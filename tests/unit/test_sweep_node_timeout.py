"""The pure tests of tests/live/test_sweep_node_timeout_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from vllmdiag.sweep.fanout import SweepPlan
from vllmdiag.sweep.transport import Transport


def test_the_plan_holds_a_node_to_timeout_unless_it_reported_a_suspicion() -> None:
    plan = SweepPlan(nodes=["a", "b"], transport=Transport(confirm_s=10.0), timeout_s=5.0)
    assert plan.quick_deadline_s("a", set()) == 5.0
    assert plan.quick_deadline_s("b", {"b"}) == 15.0
