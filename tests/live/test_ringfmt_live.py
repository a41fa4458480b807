"""The live tests of tests/unit/test_ringfmt.py, which says what they check: these start something."""

from __future__ import annotations

from vllmdiag.probes import _ringfmt as rf


def test_writer_index_from_a_wrapped_unread_run() -> None:
    # Reader 1 has not read slots 8, 9, 0, 1: the writer's next slot is 2.
    slots: rf.Slots = [(1, 1, 0), (1, 1, 0), *[(1, 1, 1)] * 6, (1, 1, 0), (1, 1, 0)]
    assert rf.writer_index(slots, 2) == 2
    assert rf.unread_per_reader(slots, 2) == [0, 4]
    torn: rf.Slots = [(1, 1, 0), (1, 1, 1), (1, 1, 0), (1, 1, 1)]  # two runs: not a real ring state
    assert rf.writer_index(torn, 2) is None
    assert rf.stable([[0, 3], [0, 3], [1, 3]]) == [None, 3]
