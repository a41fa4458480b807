"""A denied read is blindness, not an empty answer: the markers the probes leave and what analysis makes of them."""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.bisect import analyze
from vllmdiag.model import ProbeResult, Snapshot

API = 100


def _snap(api: dict[str, Any], **processes: Any) -> Snapshot:
    procs = [{"pid": API, "ppid": 1, "pgid": API, "role": "api_server", "cmdline": ["vllm", "serve", "m"], "state": "S",
              "age_s": 50.0, "start_time": 1000.0, "environ": {}, **api}]
    probes = {"processes": ProbeResult("ok", 0.0, None, {"processes": procs, **processes})}
    return Snapshot(node="n", collected_at="", vllmdiag_version="", duration_s=0.0, probes=probes)


def _engine_missing(snap: Snapshot) -> Any:
    return next(f for f in analyze([snap]).findings if f.code == "process.engine_missing")


def test_an_api_server_without_engine_is_critical_when_its_environment_was_read() -> None:
    assert _engine_missing(_snap({})).severity == "critical"


def test_without_its_environment_no_engine_is_unconfirmed_an_in_process_engine_has_none() -> None:
    found = _engine_missing(_snap({"environ_unreadable": "denied"}))
    assert found.severity == "info"
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" in found.message and found.evidence["environ_unreadable_pids"] == [API]


def test_processes_hidden_by_hidepid_make_no_deployment_say_so() -> None:
    hidden = ProbeResult("partial", 0.0, "cannot read", {"processes": [], "unreadable_pids": [7, 9]})
    snap = Snapshot(node="n", collected_at="", vllmdiag_version="", duration_s=0.0, probes={"processes": hidden})
    verdict = analyze([snap]).verdict
    assert verdict.status == "no-deployment"
    assert "could not read 2 process(es)" in verdict.summary and verdict.next_steps
