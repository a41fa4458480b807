"""The test port picker: a block of free ports below the kernel's ephemeral range (CI once lost
master_port+1 to a client's local port)."""

from __future__ import annotations

import socket

import pytest

from ports import _ephemeral_low, free_port


def test_a_block_is_below_the_ephemeral_range_and_every_port_binds() -> None:
    base = free_port("127.0.0.1", count=3)
    assert base + 3 <= _ephemeral_low()
    for port in range(base, base + 3):
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_taken_port_is_never_in_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        held = taken.getsockname()[1]
        starts = iter([held - 1, held - 1, held + 1])  # the first two tries straddle the held port
        monkeypatch.setattr("ports.random.randrange", lambda lo, hi: next(starts))
        assert free_port("127.0.0.1", count=2) == held + 1
