"""The pure tests of tests/live/test_hard_budget_live.py, which says what they check: these start nothing."""

from __future__ import annotations


def test_triage_classifies_the_stacks_as_they_arrive() -> None:
    from vllmdiag.analysis.views import stack_match
    from vllmdiag.api import classify_early

    frames = [{"name": "_run_loop", "filename": "vllm/entrypoints/openai/api_server.py", "line": 1}]
    hook = classify_early()
    hook("stacks", {"dumps": [{"pid": 1, "threads": [{"name": "MainThread", "frames": frames}]}]})  # no roles yet
    stack_match._MEMO.clear()
    hook("processes", {"processes": [{"pid": 1, "role": "api_server"}]})
    hook("stacks", {"dumps": [{"pid": 1, "threads": [{"name": "MainThread", "frames": frames}]}]})
    assert any(key[2] == "api_server" for key in stack_match._MEMO)
