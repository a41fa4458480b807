"""The pure tests of tests/live/test_rates_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from vllmdiag.analysis.layers.queue.ring_rates import slot_changes


def test_slot_changes_counts_flag_differences() -> None:
    samples = [{"flags": "10 10 00"}, {}, {"flags": "11 10 10"}, {"flags": "11 10 10"}, {"flags": "00 10 10"}]
    assert slot_changes(samples) == 3
    assert slot_changes([]) == 0
