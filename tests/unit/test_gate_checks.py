"""Gate checks as pure functions over synthetic snapshots; config validation; fleet comparison."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.gate.checks.env import env_hazards
from vllmdiag.gate.checks.gpu import check_gpu_health
from vllmdiag.gate.checks.limits import check_nofile, check_ptrace
from vllmdiag.gate.checks.url import check_ports, check_url_completion
from vllmdiag.gate.config import ConfigError, GateConfig, _check_fields, load_config, parse_config
from vllmdiag.gate.contract import all_names, by_name, names
from vllmdiag.gate.cross_node import gate_fleet
from vllmdiag.gate.junit import fleet_junit
from vllmdiag.gate.run import evaluate
from vllmdiag.gate.shm_sizing import ring_bytes
from vllmdiag.model import ProbeResult, Snapshot

GiB = 1 << 30
CHECKS, NODE_CHECKS, ALL_CHECKS = by_name(), names("node", "url"), all_names()


def snap(node: str = "n1", options: dict[str, Any] | None = None, **probes: Any) -> Snapshot:
    results = {k: v if isinstance(v, ProbeResult) else ProbeResult("ok", 0.0, None, v) for k, v in probes.items()}
    return Snapshot(node=node, collected_at="", vllmdiag_version="t", duration_s=0.1, probes=results,
                    options=options or {})


def host(free: int = 20 * GiB, **extra: Any) -> dict[str, Any]:
    return {"dev_shm": {"path": "/dev/shm", "size_bytes": free, "free_bytes": free, "used_bytes": 0},
            "euid": 0, "ptrace_scope": 0, "cap_sys_ptrace": True, **extra}


def test_ring_sizes_match_reference_table() -> None:
    assert ring_bytes(2)["rpc_broadcast"] == 167_772_190
    assert ring_bytes(8)["rpc_broadcast"] == 167_772_250
    assert ring_bytes(8)["worker_response"] == 8 * 251_658_260
    assert ring_bytes(4)["tp_broadcaster"] == 25_165_848
    assert ring_bytes(1)["total"] == 0  # UniProcExecutor


def test_shm_capacity_fails_when_tp8_does_not_fit() -> None:
    cfg = GateConfig(tp=8)
    res = CHECKS["shm_capacity"](snap(host=host(free=64 << 20)), cfg)
    assert res.status == "fail" and res.numbers["need_bytes"] > 2 * GiB and "Insufficient space" in res.reason
    assert CHECKS["shm_capacity"](snap(host=host()), cfg).status == "pass"


def test_shm_leaks_ignores_mapped_young_and_foreign_segments() -> None:
    segs = [{"name": "psm_00000001", "kind": "psm", "mapped_by": [5], "mapped_by_other": [], "age_s": 100, "size_bytes": 1},
            {"name": "psm_00000002", "kind": "psm", "mapped_by": [], "mapped_by_other": [9], "age_s": 100, "size_bytes": 1},
            {"name": "psm_00000003", "kind": "psm", "mapped_by": [], "mapped_by_other": [], "age_s": 1, "size_bytes": 1},
            {"name": "nccl-abc", "kind": "nccl", "mapped_by": [], "mapped_by_other": [], "age_s": 100, "size_bytes": 7,
             "allocated_bytes": 4096},
            {"name": "other", "kind": "other", "mapped_by": [], "mapped_by_other": [], "age_s": 100, "size_bytes": 1}]
    res = CHECKS["shm_leaks"](snap(shm={"segments": segs}), GateConfig())
    assert res.status == "fail" and res.numbers["leaked"] == 1 and "nccl-abc" in res.reason


def test_gpu_check_fails_on_ecc_and_skips_without_nvml() -> None:
    gpus = [{"index": 0, "ecc_errors": {"volatile_uncorrected": 0}, "persistence_mode": True, "processes": []},
            {"index": 1, "ecc_errors": {"volatile_uncorrected": 3, "aggregate_uncorrected": 5}, "persistence_mode": True}]
    res = check_gpu_health(snap(nvml={"gpus": gpus}), GateConfig())
    assert res.status == "fail" and "GPU1: 3 uncorrected ECC" in res.reason
    assert check_gpu_health(snap(), GateConfig()).status == "skip"
    assert check_gpu_health(snap(), GateConfig(require_nvml=True)).status == "fail"
    skipped = ProbeResult("skipped", 0.0, "no NVIDIA driver")
    assert check_gpu_health(snap(nvml=skipped), GateConfig()).status == "skip"
    hung = ProbeResult("timeout", 2.0, "no answer within 2.0 s")
    assert check_gpu_health(snap(nvml=hung), GateConfig()).status == "fail"


def test_gpu_check_xid_persistence_and_foreign_memory() -> None:
    gpus = [{"index": 0, "xid_events": [79], "persistence_mode": True},
            {"index": 1, "persistence_mode": False, "processes": [{"pid": 4242, "used_memory_bytes": 1 << 30}]}]
    res = check_gpu_health(snap(nvml={"gpus": gpus}), GateConfig())
    assert res.status == "fail" and "Xid" in res.reason and "4242" in res.reason
    ok = check_gpu_health(snap(nvml={"gpus": [{"index": 0, "persistence_mode": False}]}), GateConfig())
    assert ok.status == "warn" and "persistence" in ok.reason


def test_env_hazards() -> None:
    bad, odd = env_hazards({"CUDA_VISIBLE_DEVICES": "0,1", "VLLM_WORKER_MULTIPROC_METHOD": "forkserver"}, 4, [])
    assert any("CUDA_VISIBLE_DEVICES" in b for b in bad) and any("MULTIPROC" in b for b in bad)
    bad, odd = env_hazards({"NCCL_P2P_DISABLE": "1", "NCCL_P2P_LEVEL": "NVL", "VLLM_RPC_TIMEOUT": "1"}, 2, [])
    assert not bad and len(odd) == 3
    _, odd = env_hazards({"NCCL_P2P_DISABLE": "1"}, 2, ["vllm serve m --disable-custom-all-reduce"])
    assert odd == []


def test_env_fails_when_workers_disagree() -> None:
    procs = [{"pid": p, "role": "worker", "state": "S", "environ": {"NCCL_ALGO": algo, "RANK": str(p)}}
             for p, algo in ((1, "Ring"), (2, "Tree"))]
    res = CHECKS["env"](snap(processes={"processes": procs}), GateConfig())
    assert res.status == "fail" and "NCCL_ALGO" in res.numbers["inconsistent"] and "RANK" not in res.numbers["inconsistent"]


def test_limits_ptrace_and_ports() -> None:
    pre = {"rlimits": {"nofile": [1024, 4096], "nproc": [None, None]}, "listening": [
        {"port": 8000, "local": "00000000", "pids": [77], "comm": "nginx"}]}
    assert check_nofile(snap(preflight=pre), GateConfig()).status == "fail"
    res = check_ports(snap(preflight=pre), GateConfig(ports=(8000, 29500)))
    assert res.status == "fail" and "pid 77 nginx" in res.reason
    with_url = snap(preflight=pre, options={"gate_url": "http://127.0.0.1:9"})
    assert check_ports(with_url, GateConfig()).status == "fail"
    assert check_ptrace(snap(host=host(ptrace_scope=3)), GateConfig()).status == "fail"
    assert check_ptrace(snap(host=host(euid=1000, cap_sys_ptrace=False, ptrace_scope=1)), GateConfig()).status == "fail"


def test_url_completion_timeout_names_health_blind_spot() -> None:
    data = {"model": "m", "health": {"status_code": 200}, "completion": {"timed_out": True, "deadline_s": 2.0}}
    res = check_url_completion(snap(gate_url=data), GateConfig())
    assert res.status == "fail" and "does not probe workers" in res.reason


def test_evaluate_marks_advisory_and_skips_missing_probes() -> None:
    results = {r.name: r for r in evaluate(snap(host=host()), GateConfig())}
    assert set(results) == set(NODE_CHECKS) - {"url_health", "url_metrics", "url_completion"}
    assert results["pyspy"].status == "skip" and results["pyspy"].required is False
    assert results["shm_capacity"].status == "pass"


def test_config_default_and_errors(tmp_path: Path) -> None:
    _check_fields()
    from vllmdiag.gate.config import default_yaml

    assert parse_config(__import__("yaml").safe_load(default_yaml())) == GateConfig()
    cfg = parse_config({"tp": 4, "shm": {"headroom": "1GiB"}, "advisory": ["gpu_health"]})
    assert cfg.tp == 4 and cfg.shm_headroom_bytes == GiB and not cfg.required("gpu_health")
    for bad, words in (({"tp": 0}, "tp must be"), ({"shm": {"hedroom": 1}}, "unknown key 'shm.hedroom'"),
                       ({"skip": ["nope"]}, "unknown check"), ([1], "mapping"), ({"ports": [70000]}, "ports")):
        with pytest.raises(ConfigError, match=words):
            parse_config(bad)
    broken = tmp_path / "g.yaml"
    broken.write_text("tp: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken)
    assert "fleet_libnccl" in ALL_CHECKS


def test_fleet_gate_names_the_node_with_another_nccl_build() -> None:
    def node(name: str, build: str) -> Snapshot:
        libs = {"nccl": [{"path": "/usr/lib/libnccl.so.2.21.5", "build_id": build}], "packages": {"vllm": "0.33.0"}}
        return snap(name, host=host(), libs=libs)

    snaps = {f"gpu{i:02d}": node(f"gpu{i:02d}", "aa" if i != 2 else "bb") for i in range(4)}
    fleet = gate_fleet(snaps, GateConfig(), missing={"gpu09": "ssh: connect timed out"})
    assert fleet.exit_code == 1
    checks = {n: {c.name: c for c in r.checks} for n, r in fleet.nodes.items()}
    assert checks["gpu02"]["fleet_libnccl"].status == "fail" and "gpu[00-01,03]" in checks["gpu02"]["fleet_libnccl"].reason
    assert checks["gpu00"]["fleet_libnccl"].status == "pass"
    assert checks["gpu00"]["fleet_versions"].status == "pass"
    assert checks["gpu09"]["collect"].status == "fail"
    summary = {c.name: c for c in fleet.fleet_checks}
    assert summary["fleet_libnccl"].status == "fail" and "gpu02" in summary["fleet_libnccl"].reason
    suites = ET.fromstring(fleet_junit(fleet)).findall("testsuite")
    assert [s.get("name") for s in suites] == ["gpu00", "gpu01", "gpu02", "gpu03", "gpu09"]
    failed = [c.get("name") for c in suites[2].findall("testcase") if c.find("failure") is not None]
    assert failed == ["fleet_libnccl"]
    assert fleet.to_dict()["failed_nodes"] == ["gpu02", "gpu09"]


def test_env_of_two_healthy_deployments_may_differ_but_ranks_of_one_may_not() -> None:
    """issue 26: two deployments differing in one VLLM_* variable failed "processes of one deployment disagree"."""
    def tree(root: int, value: str, odd: str | None = None) -> list[dict[str, Any]]:
        env = {"VLLM_USE_V1": "1", "VLLM_LOGGING_LEVEL": value}
        procs = [{"pid": root, "ppid": 1, "pgid": root, "role": "api_server", "state": "S", "environ": dict(env),
                  "start_time": 1.0, "title": "vllm serve", "cmdline": ["vllm", "serve", "m"]},
                 {"pid": root + 1, "ppid": root, "pgid": root, "role": "engine_core", "state": "S", "environ": dict(env),
                  "start_time": 2.0, "title": "VLLM::EngineCore"}]
        for i in range(2):
            procs.append({"pid": root + 2 + i, "ppid": root + 1, "pgid": root, "role": "worker", "state": "S",
                          "environ": {**env, **({"VLLM_LOGGING_LEVEL": odd} if odd and i else {})},
                          "start_time": 3.0, "title": f"VLLM::Worker_TP{i}", "ranks": {"tp": i}})
        return procs

    two = CHECKS["env"](snap(processes={"processes": tree(100, "INFO") + tree(200, "DEBUG")}), GateConfig())
    assert two.status == "pass", two.reason
    one_odd = CHECKS["env"](snap(processes={"processes": tree(100, "INFO") + tree(200, "DEBUG", odd="WARN")}),
                            GateConfig())
    assert one_odd.status == "fail" and ":200" in one_odd.reason and ":100" not in one_odd.reason, one_odd.reason


def test_junit_times_are_measured_per_check() -> None:
    """issue 26: every <testcase> said time="0", the 10 s completion check included."""
    from vllmdiag.gate.result import NodeGateResult

    s = snap(options={"gate_url": "http://127.0.0.1:1"},
             gate_url={"url": "http://127.0.0.1:1", "model": "m",
                       "health": {"status_code": 200, "duration_s": 0.25},
                       "metrics": {"status_code": 200, "duration_s": 0.5, "counts": {"num_requests_running": 0.0}},
                       "completion": {"status_code": 200, "duration_s": 9.5, "choices": 1, "deadline_s": 10.0}})
    checks = evaluate(s, GateConfig())
    xml = ET.fromstring(fleet_junit_nodes([NodeGateResult("n1", checks)]))
    times = {c.get("name"): float(c.get("time") or -1) for c in xml.iter("testcase")}
    assert times["url_completion"] >= 9.5 and times["url_health"] >= 0.25
    assert all(t > 0 for t in times.values()), times


def fleet_junit_nodes(nodes: list[Any]) -> str:
    from vllmdiag.gate.junit import to_junit

    return to_junit(nodes)
