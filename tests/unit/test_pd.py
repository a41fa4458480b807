"""Disaggregated P/D (real-hang-patterns row 17): the KV connector a deployment declares, the KV-wait rule,
and, on the simulator, that a decode instance whose KV never comes is degraded with the producer named,
while nothing is ever sent to its NIXL side channel."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vllmdiag.analysis.views import kv_transfer
from vllmdiag.analysis.views.stack_match import classify_threads
from vllmdiag.probes.http import parse_metrics
from vllmdiag.redact import redact_argv
from vllmdiag.vocab.stack_classes import ENGINE_BUSY, ENGINE_YIELD, EXECUTING, KV_TRANSFER

NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_consumer",
        "kv_connector_extra_config": {"kv_lease_duration": 60, "api_key": "s3cr3t-value"}}


@pytest.mark.parametrize("argv", [
    ["vllm", "serve", "m", "--kv-transfer-config", json.dumps(NIXL)],
    ["vllm", "serve", "m", "--kv-transfer-config=" + json.dumps(NIXL)],
    ["vllm", "serve", "m", "--kv-transfer-config.kv_connector", "NixlConnector", "--kv-transfer-config.kv_role=kv_consumer"],
])
def test_connector_and_role_from_every_command_line_form(argv: list[str]) -> None:
    cfg = kv_transfer.parse_config(redact_argv(argv))  # what the processes probe stores
    assert cfg is not None and (cfg["connector"], cfg["role"]) == ("NixlConnector", "kv_consumer")


def test_redaction_keeps_the_config_readable_and_drops_the_secret() -> None:
    argv = redact_argv(["vllm", "serve", "m", "--kv-transfer-config", json.dumps(NIXL)])
    assert "s3cr3t-value" not in " ".join(argv)
    cfg = kv_transfer.parse_config(argv)
    assert cfg is not None and cfg["extra"] == {"kv_lease_duration": 60}


@pytest.mark.parametrize("argv", [
    ["vllm", "serve", "m"], ["vllm", "serve", "m", "--kv-transfer-config", "{not json"],
    ["vllm", "serve", "m", "--kv-transfer-config", "[1, 2]"], ["vllm", "serve", "m", "--kv-transfer-config"],
    ["vllm", "serve", "m", "--kv-transfer-config", json.dumps({"kv_role": "kv_consumer"})],
])
def test_no_connector_or_garbage_is_no_pd(argv: list[str]) -> None:
    assert kv_transfer.parse_config(argv) is None


def test_untrusted_values_are_bounded() -> None:
    cfg = kv_transfer.parse_config(["--kv-transfer-config", json.dumps(
        {"kv_connector": "X" * 500, "kv_role": "kv_\x1b[31mconsumer", "engine_id": ["x"]})])
    assert cfg is not None and len(cfg["connector"]) == 80 and cfg["role"] is None and cfg["engine_id"] is None


def sample(at: float, running: float, waiting: float, tokens: float, **kv: float) -> dict[str, Any]:
    return {"at_s": at, "running": running, "waiting": waiting, "generation_tokens": tokens, "prompt_tokens": 5.0,
            **{f"kv_fetch_{k}": v for k, v in kv.items()}}


def test_kv_wait_needs_waiting_none_running_no_token_and_the_gauge() -> None:
    parked = [sample(0, 0, 2, 7, waiting_to_start=0, in_progress=2), sample(1, 0, 2, 7, waiting_to_start=0, in_progress=2)]
    wait = kv_transfer.waiting_for_kv(parked, 1.0, "kv_consumer")
    assert wait is not None and wait["source"] == "kv_fetch gauge" and wait["kv_fetch"]["in_progress"] == 2
    assert kv_transfer.waiting_for_kv(parked, 0.05, "kv_consumer") is None  # too short a look
    moving = [parked[0], sample(1, 0, 2, 9, in_progress=2)]
    assert kv_transfer.waiting_for_kv(moving, 1.0, "kv_consumer") is None
    running = [parked[0], sample(1, 1, 1, 7, in_progress=1)]
    assert kv_transfer.waiting_for_kv(running, 1.0, "kv_consumer") is None
    capacity = [sample(0, 0, 2, 7, waiting_to_start=0, in_progress=0), sample(1, 0, 2, 7, waiting_to_start=0, in_progress=0)]
    assert kv_transfer.waiting_for_kv(capacity, 1.0, "kv_consumer") is None  # they wait for something else
    no_gauge = [sample(0, 0, 2, 7), sample(1, 0, 2, 7)]
    assert kv_transfer.waiting_for_kv(no_gauge, 1.0, "kv_consumer")["source"] == "kv_role"  # type: ignore[index]
    assert kv_transfer.waiting_for_kv(no_gauge, 1.0, "kv_both") is None  # it prefills too: the role cannot say


def test_kv_fetch_stages_parsed_by_label_and_nothing_invented() -> None:
    text = ('vllm:num_requests_kv_fetch_by_stage{engine="0",stage="in_progress"} 3\n'
            'vllm:num_requests_kv_fetch_by_stage{engine="1",stage="in_progress"} 1\n'
            'vllm:num_requests_kv_fetch_by_stage{engine="0",stage="evil_key"} 9\n'
            'vllm:num_requests_waiting_by_reason{engine="0",reason="deferred"} 4\n'
            'vllm:num_requests_waiting_by_reason{engine="0",reason="capacity"} 1\n')
    got = parse_metrics(text)
    assert got["kv_fetch_in_progress"] == 4 and got["waiting_deferred"] == 4
    assert not any("evil" in k or "capacity" in k for k in got)


def frames(*chain: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"name": "MainThread", "frames": [[f, file, 1] for f, file in chain]}]


CORE = "vllm/v1/engine/core.py"


def test_vllm_033_poll_frames_are_classified() -> None:
    # vLLM 0.33 core.py: run_busy_loop -> _process_engine_step, time.sleep(0.001) (no Python frame)
    yielding = frames(("_process_engine_step", CORE), ("run_busy_loop", CORE), ("run_engine_core", CORE))
    assert classify_threads(yielding, "engine_core").name == ENGINE_YIELD
    # ... but inside a step it is not yielding
    scheduling = frames(("schedule", "vllm/v1/core/sched/scheduler.py"), ("step", CORE),
                        ("_process_engine_step", CORE), ("run_busy_loop", CORE))
    assert classify_threads(scheduling, "engine_core").name == ENGINE_BUSY
    polling = frames(("get_transfer_results", "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py"),
                     ("get_finished", "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py"),
                     ("_get_kv_connector_output", "vllm/v1/worker/kv_connector_model_runner_mixin.py"),
                     ("kv_connector_no_forward", "vllm/v1/worker/kv_connector_model_runner_mixin.py"),
                     ("execute_model", "vllm/v1/worker/gpu_model_runner.py"),
                     ("execute_model", "vllm/v1/worker/gpu_worker.py"))
    assert classify_threads(polling, "worker").name == KV_TRANSFER
    forward = frames(("forward", "vllm/model_executor/layers/linear.py"), ("execute_model", "vllm/v1/worker/gpu_model_runner.py"))
    assert classify_threads(forward, "worker").name == EXECUTING


# ---- the wrong culprit of row 17, on a snapshot shaped like the client layer's tests ------------------
def _snapshot(argv: list[str], waiting: dict[str, float], tcp: list[dict[str, Any]] | None = None) -> Any:
    from vllmdiag.model import ProbeResult, Snapshot

    procs = [{"pid": 100, "ppid": 1, "pgid": 100, "role": "api_server", "state": "S", "cmdline": argv,
              "environ": {"VLLM_NIXL_SIDE_CHANNEL_HOST": "10.0.0.7", "VLLM_NIXL_SIDE_CHANNEL_PORT": "5600"}},
             {"pid": 101, "ppid": 100, "pgid": 100, "role": "engine_core", "state": "S", "titled": True,
              "title": "VLLM::EngineCore", "cmdline": ["VLLM::EngineCore"]}]
    m = {"status": 200, "running": 0.0, "generation_tokens": 10.0, "prompt_tokens": 5.0, **waiting}
    http = {"sample_gap_s": 0.5, "servers": [{"address": "127.0.0.1:8000", "port": 8000, "pids": [100],
                                             "connections": [], "health": {"status": 200}, "metrics": [m, dict(m)]}]}
    return Snapshot(node="t", collected_at="", vllmdiag_version="", duration_s=0.0,
                    probes={"processes": ProbeResult("ok", 0.0, None, {"processes": procs}),
                            "http": ProbeResult("ok", 0.0, None, http),
                            "sockets": ProbeResult("ok", 0.0, None, {"tcp": tcp or [], "unix": []})})


SERVE = ["vllm", "serve", "m"]
PARKED = {"waiting": 3.0, "kv_fetch_waiting_to_start": 0.0, "kv_fetch_in_progress": 3.0, "kv_fetch_completed_waiting": 0.0}
TCP = [{"local": "10.0.0.7:5600", "remote": "0.0.0.0:0", "state": "LISTEN", "pids": [101]},
       {"local": "10.0.0.7:8000", "remote": "0.0.0.0:0", "state": "LISTEN", "pids": [100]},
       {"local": "10.0.0.7:8000", "remote": "10.0.0.9:51000", "state": "ESTABLISHED", "pids": [100]},  # an HTTP client
       {"local": "10.0.0.7:40112", "remote": "10.0.0.3:5600", "state": "ESTABLISHED", "pids": [101]}]  # the producer


def test_without_a_connector_waiting_requests_still_blame_the_engine() -> None:
    from vllmdiag.analysis.bisect import analyze

    v = analyze([_snapshot(SERVE, {"waiting": 3.0})]).verdict
    assert (v.status, v.layer) == ("blocked", "client") and v.culprits[0].pid == 101


def test_a_decode_instance_waiting_for_kv_is_degraded_with_the_producer_named_not_the_engine() -> None:
    from vllmdiag.analysis.bisect import analyze

    argv = [*SERVE, "--kv-transfer-config", json.dumps(NIXL)]
    report = analyze([_snapshot(argv, PARKED, TCP)])
    v = report.verdict
    assert (v.status, v.layer, v.confidence) == ("degraded", "queue", "medium"), v.summary
    assert [(c.role, c.pid, c.node) for c in v.culprits] == [("kv_producer", None, "10.0.0.3")]
    assert "NixlConnector" in v.summary and "10.0.0.3:5600" in v.summary
    assert any("sweep" in s for s in v.next_steps)
    info = next(f for f in report.findings if f.code == "queue.kv_connector")
    assert info.evidence["peers"] == ["10.0.0.3:5600"] and info.evidence["side_channel_listening"] is True


def test_a_consumer_whose_requests_wait_for_capacity_is_not_excused() -> None:
    from vllmdiag.analysis.bisect import analyze

    argv = [*SERVE, "--kv-transfer-config", json.dumps(NIXL)]
    capacity = {**PARKED, "kv_fetch_in_progress": 0.0}  # vLLM says none of them waits for KV
    v = analyze([_snapshot(argv, capacity, TCP)]).verdict
    assert (v.status, v.layer) == ("blocked", "client") and v.culprits[0].pid == 101


def test_nixl_counters_are_read_when_exported_and_named_in_the_finding() -> None:
    text = ('vllm:nixl_num_failed_transfers_total{engine="0"} 3\nvllm:nixl_xfer_time_seconds_count{engine="0"} 40\n'
            'vllm:nixl_xfer_time_seconds_bucket{engine="0",le="0.1"} 40\n')
    got = parse_metrics(text)
    assert (got["kv_failed_transfers"], got["kv_transfers"]) == (3, 40) and "kv_expired_requests" not in got
    assert "kv_failed_transfers" not in parse_metrics("")  # absent stays absent

    from vllmdiag.analysis.bisect import analyze

    snap = _snapshot([*SERVE, "--kv-transfer-config", json.dumps(NIXL)], {**PARKED, "kv_transfers": 40.0})
    first, last = snap.data("http")["servers"][0]["metrics"]
    first["kv_failed_transfers"], last["kv_failed_transfers"] = 1.0, 3.0
    v = analyze([snap]).verdict
    assert "NIXL counts completed transfers 40, failed transfers 1 -> 3" in v.summary, v.summary
