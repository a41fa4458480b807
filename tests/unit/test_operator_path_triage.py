"""The pure tests of tests/live/test_operator_path_triage_live.py, which says what they check: these start nothing."""

from __future__ import annotations


def test_past_the_limit_the_rest_are_named_in_one_line() -> None:
    from vllmdiag.render.culprits import limited

    many = [{"node": f"n{i}", "pid": 100 + i, "role": "engine_core", "rank": None, "title": "VLLM::EngineCore",
             "reason": f"r{i}"} for i in range(9)]
    shown, more = limited(many, 6)
    assert len(shown) == 5 and more.startswith("and 4 more: ")
    assert all(f"pid {100 + i}" in more for i in range(5, 9)), more
