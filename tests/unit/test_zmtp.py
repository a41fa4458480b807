"""The pure tests of tests/live/test_zmtp_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from vllmdiag.probes._zmtp import parse_properties


def test_parse_properties() -> None:
    body = b"\x0bSocket-Type\x00\x00\x00\x06ROUTER\x08Identity\x00\x00\x00\x00"
    assert parse_properties(body) == {"Socket-Type": "ROUTER", "Identity": ""}
    assert parse_properties(b"\x0bSocket-Type\x00\x00") == {}  # truncated: no crash
