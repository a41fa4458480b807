"""Titles and command lines of vLLM 0.33 processes (vllm-internals 2.1, 3.1)."""

from __future__ import annotations

from vllmdiag.vocab.titles import parse_cmdline


def test_custom_prefix() -> None:
    assert parse_cmdline(["MYCO::Worker_TP1"], prefix="MYCO").role == "worker"
    assert parse_cmdline(["MYCO::Worker_TP1"]).role is None
