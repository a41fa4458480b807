"""The pure tests of tests/live/test_http_probe_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from vllmdiag.context import Context
from vllmdiag.model import ProbeResult
from vllmdiag.probe import Partial
from vllmdiag.probes import http, sockets


def api_proc(pid: int, port: int) -> dict[str, Any]:
    return {"pid": pid, "ppid": os.getpid(), "pgid": pid, "role": "api_server", "age_s": 1.0,
            "cmdline": ["vllm", "serve", "m", "--port", str(port)], "ns": {}, "environ": {}}


def collect_http(procs: list[dict[str, Any]], budget_s: float = 4.0, **options: Any) -> dict[str, Any] | Partial:
    ctx = Context(options=dict(options))
    ctx.deadline = time.monotonic() + budget_s
    ctx.record("processes", ProbeResult("ok", 0.0, None, {"processes": procs}))
    socks = sockets.collect(ctx)
    assert isinstance(socks, dict), socks  # the test's own processes: every fd readable
    ctx.record("sockets", ProbeResult("ok", 0.0, None, socks))
    ctx.mark_others_done()  # no other probes: take the second sample after the minimum gap
    return http.collect(ctx)


def test_skips_without_api_server() -> None:
    from vllmdiag.probe import Skip

    with pytest.raises(Skip):
        collect_http([{"pid": os.getpid(), "ppid": 1, "pgid": 1, "role": "engine_core"}])


def test_parse_metrics_sums_engines_and_ignores_other_series() -> None:
    text = (
        "# HELP vllm:num_requests_waiting Number of requests waiting.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="a b}c"} 3.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="a b}c"} 2.0 1700000000000\n'
        "vllm:num_requests_running 1\n"
        'vllm:generation_tokens_total{engine="0"} 1.5e3\n'
        'vllm:generation_tokens_created{engine="0"} 1.7e9\n'
        'vllm:request_success_total{finished_reason="stop"} 9\n'
        "vllm:prompt_tokens_total{engine=\"0\",x=\"q\\\"}\"} NaN\n"
        "garbage line {\n")
    got = http.parse_metrics(text)
    assert got["waiting"] == 5.0 and got["running"] == 1.0 and got["generation_tokens"] == 1500.0
    # NaN is no count: dropped and said, never a float that strict JSON refuses (issue 25 item 7)
    assert got["prompt_tokens"] is None and got["metrics_dropped"] == ["vllm:prompt_tokens_total NaN"]
    assert http.parse_metrics("") == {"running": None, "waiting": None, "generation_tokens": None, "prompt_tokens": None}
