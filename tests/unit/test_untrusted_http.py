"""Hostile HTTP answers (issue 25 item 1): the raw HTTP reader and the /metrics parsers move only
forward, stay bounded in time and memory, and refuse what is not HTTP or not a count.

A local user can run a process whose argv looks like `vllm serve` and answer the watcher's GET with
anything: a chunk size of ``-64`` once walked the chunk parser backwards forever (a core busy, ~5 MB/s
of RSS until the OOM killer). Real sockets for the framings, hypothesis for the parsers."""

from __future__ import annotations

import json
import math
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import _COUNTER
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllmdiag.gate import urlprobe
from vllmdiag.probes import http
from vllmdiag.probes._httpget import MAX_CHUNK_LINE, BadResponse, Body

# ---- the pure decoder, fuzzed ------------------------------------------------------------------

class _Alarm(Exception):
    pass


@contextmanager
def cpu_deadline(seconds: float) -> Iterator[None]:
    """A pure-Python loop that never ends (the old ``-64``) is interrupted instead of hanging the suite."""
    def ring(*_: Any) -> None:
        raise _Alarm

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _feed_all(headers: dict[str, str], pieces: list[bytes], max_body: int) -> Body:
    body = Body(headers, max_body)
    for piece in pieces:
        body.feed(piece)
    return body


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, last = [], 0
    for p in points + [len(data)]:
        out.append(data[last:p])
        last = p
    return out


SIZE_LINE = st.one_of(
    st.binary(max_size=24),
    st.sampled_from([b"-64", b"+1", b"-0", b"1_0", b"0x1", b" 1", b"\t1 ", b"1;a=b", b"ffffffffffffffffff", b"1e3",
                     b"\xb2", b"NaN", b"inf", b"0" * 30 + b"1"]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(SIZE_LINE, st.binary(max_size=40), st.sampled_from([b"\r\n", b"", b"\n", b"xx"])),
                max_size=8),
       st.lists(st.integers(0, 10_000), max_size=6), st.integers(0, 300))
def test_fuzz_chunked_framing_moves_forward_and_stays_bounded(frames: list[tuple[bytes, bytes, bytes]],
                                                              cuts: list[int], max_body: int) -> None:
    raw = b"".join(size + b"\r\n" + data + end for size, data, end in frames)
    with cpu_deadline(5.0):
        try:
            body = _feed_all({"transfer-encoding": "chunked"}, _split(raw, cuts), max_body)
        except BadResponse:
            _COUNTER.case()
            return
    _COUNTER.case()
    assert len(body.data()) <= max_body and len(body.data()) <= len(raw)
    assert body.done or len(body._raw) <= MAX_CHUNK_LINE + 1  # what waits to be decoded: one size line at most


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.binary(min_size=1, max_size=50), max_size=8), st.lists(st.text("ab;=", max_size=6), max_size=8),
       st.lists(st.integers(0, 10_000), max_size=6))
def test_fuzz_well_framed_chunks_decode_exactly_however_they_arrive(chunks: list[bytes], exts: list[str],
                                                                     cuts: list[int]) -> None:
    raw = b""
    for i, chunk in enumerate(chunks):
        ext = (";" + exts[i]) if i < len(exts) and exts[i] else ""
        raw += b"%x%s\r\n%s\r\n" % (len(chunk), ext.encode(), chunk)
    raw += b"0\r\n\r\n"
    body = _feed_all({"transfer-encoding": "chunked"}, _split(raw, cuts), 1 << 20)
    assert body.done and body.data() == b"".join(chunks)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=24), st.binary(max_size=64), st.integers(0, 100))
def test_fuzz_content_length_is_ascii_digits_within_the_limit(length: str, data: bytes, max_body: int) -> None:
    try:
        body = _feed_all({"content-length": length}, [data], max_body)
    except BadResponse:
        return
    assert length.isascii() and length.isdigit() and int(length) <= max_body
    assert body.data() == data[:int(length)]


def test_a_body_over_the_limit_is_refused_not_cut_short() -> None:
    with pytest.raises(BadResponse):
        _feed_all({}, [b"x" * 60, b"x" * 60], 100)  # close-delimited
    with pytest.raises(BadResponse):
        _feed_all({"transfer-encoding": "chunked"}, [b"40\r\n" + b"x" * 64 + b"\r\n" + b"40\r\n"], 100)


# ---- the /metrics parsers ---------------------------------------------------------------------

VALUES = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70),
                   st.sampled_from(["NaN", "+Inf", "-Inf", "1e400", "-1e400", "1e-400", "-0", "4.9e-324",
                                    "1.7976931348623157e308", "0x10", "1_000", "", "--1"]))
SERIES = st.sampled_from(list(http.METRICS) + list(http.OPTIONAL) + ['vllm:num_requests_kv_fetch_by_stage',
                                                                     "vllm:num_requests_waiting_by_reason"])
LABELS = st.sampled_from(["", '{engine="0"}', '{stage="in_progress"}', '{reason="deferred"}', '{a="}"}', "{",
                          '{a="\\"}"}'])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(SERIES, LABELS, VALUES), max_size=12), st.text(max_size=40))
def test_fuzz_metrics_values_are_finite_non_negative_counts_or_dropped_and_said(rows: list[tuple[str, str, Any]],
                                                                               noise: str) -> None:
    text = "\n".join(f"{name}{labels} {value}" for name, labels, value in rows) + "\n" + noise
    with cpu_deadline(5.0):
        got = http.parse_metrics(text)
        gate = urlprobe.parse_metrics(text)
    _COUNTER.case()
    for key, value in got.items():
        if key == "metrics_dropped":
            assert isinstance(value, list) and 0 < len(value) <= http.MAX_DROPPED + 1
            continue
        if key == "by_engine":  # per DP engine label: the same finite non-negative counts, bounded keys
            assert isinstance(value, dict) and len(value) <= http.MAX_ENGINES
            assert all(isinstance(v, float) and math.isfinite(v) and v >= 0 for m in value.values() for v in m.values())
            continue
        assert value is None or (isinstance(value, float) and math.isfinite(value) and value >= 0), (key, value)
    for key, value in gate.items():
        assert key == "dropped" or (math.isfinite(value) and value >= 0), (key, value)
    json.dumps(got, allow_nan=False)  # strict JSON: what --json and the webhook carry
    plain = [_number(v) for name, lab, v in rows if lab in ("", '{engine="0"}') and name not in http.LABELED]
    if any(n is not None and not (math.isfinite(n) and n >= 0) for n in plain):
        assert got.get("metrics_dropped"), "a refused value must be said"


def _number(value: Any) -> float | None:
    try:
        return float(str(value).split()[0])
    except (ValueError, IndexError):
        return None


def test_nan_inf_and_negative_metrics_are_dropped_and_named() -> None:
    got = http.parse_metrics("vllm:num_requests_running NaN\nvllm:num_requests_waiting -3\n"
                             "vllm:generation_tokens_total 1e400\nvllm:prompt_tokens_total 12\n")
    assert got["running"] is None and got["waiting"] is None and got["generation_tokens"] is None
    assert got["prompt_tokens"] == 12.0
    assert got["metrics_dropped"] == ["vllm:num_requests_running NaN", "vllm:num_requests_waiting -3",
                                      "vllm:generation_tokens_total 1e400"]
