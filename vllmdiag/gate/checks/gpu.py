"""gpu_health: ECC, Xid, retired/remapped pages, persistence mode, foreign GPU memory holders (from `nvml`).

The nvml probe reports each field independently (None when the GPU does not support a query), so
this check reads counters by what their key names say (ecc + uncorrected, retired + pending, remap,
xid, persistence) instead of one fixed layout: an unsupported field loses that field, not the check.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.views import nvml_pids
from vllmdiag.gate.common import vllm_processes
from vllmdiag.gate.config import GateConfig
from vllmdiag.gate.contract import GateCheck
from vllmdiag.gate.result import CheckResult, result
from vllmdiag.model import Snapshot


def check_gpu_health(snap: Snapshot, cfg: GateConfig) -> CheckResult:
    name = "gpu_health"
    res = snap.probes.get("nvml")
    absent = "probe 'nvml' not available" if res is None else None
    if res is not None and res.status == "skipped":
        absent = f"NVML not readable: {res.reason}"
    if absent:
        fix = " (gpu.require_nvml is true)" if cfg.require_nvml else ""
        return result(name, "fail" if cfg.require_nvml else "skip", absent + fix)
    assert res is not None
    if res.status in ("error", "timeout"):
        # A wedged NVML call is itself a sick GPU or driver (the probe runs it in a killable child).
        return result(name, "fail", f"NVML query {res.status}: {res.reason}", probe_status=res.status)
    gpus = gpu_list(res.data)
    if not gpus:
        status = "fail" if cfg.require_nvml else "warn"
        return result(name, status, "NVML answered but reported no GPU", gpus=0)
    procs = snap.data("processes").get("processes", [])
    ours = _ours(res.data, procs)
    fails: list[str] = []
    warns: list[str] = []
    rows = []
    for i, gpu in enumerate(gpus):
        facts = gpu_facts(gpu, ours)
        label = f"GPU{gpu.get('index', i)}"
        rows.append({"gpu": label, **facts})
        bad, odd = judge(facts)
        fails += [f"{label}: {b}" for b in bad]
        warns += [f"{label}: {w}" for w in odd]
        if facts["foreign_pids"]:
            msg = f"{label}: memory held by non-vLLM pid(s) {facts['foreign_pids']}"
            (warns if vllm_processes(snap) else fails).append(msg)
    numbers = {"gpus": rows}
    if fails:
        return result(name, "fail", "; ".join(fails[:6]), **numbers)
    if warns:
        return result(name, "warn", "; ".join(warns[:6]), **numbers)
    return result(name, "pass", f"{len(gpus)} GPU(s): no ECC/Xid/retired-page problems", **numbers)


def gpu_list(data: dict[str, Any]) -> list[dict[str, Any]]:
    for key in ("gpus", "devices"):
        if isinstance(data.get(key), list):
            return [g for g in data[key] if isinstance(g, dict)]
    return []


def gpu_facts(gpu: dict[str, Any], vllm_pids: set[int]) -> dict[str, Any]:
    leaves = list(_leaves(gpu, ""))

    def total(*need: str, without: str = "\0") -> int:
        return sum(int(v) for p, v in leaves if all(n in p for n in need) and without not in p and _num(v))

    xid = [v for p, v in leaves if "xid" in p and v not in (None, 0, False, "", [])]
    persistence = [v for p, v in leaves if "persistence" in p and v is not None]
    holders = _holders(gpu)
    return {
        "ecc_uncorrected_volatile": total("ecc", "uncorrect", without="aggregate"),
        "ecc_uncorrected_aggregate": total("ecc", "uncorrect", "aggregate"),
        "retired_pending": any(bool(v) for p, v in leaves if "retired" in p and "pending" in p),
        "retired_pages": total("retired", without="pending"),
        "remap_failed_or_pending": any(bool(v) for p, v in leaves if "remap" in p and ("fail" in p or "pending" in p)),
        "xid": xid[:10],
        "persistence_mode": persistence[0] if persistence else None,
        "foreign_pids": sorted(pid for pid in holders if pid not in vllm_pids),
    }


def judge(f: dict[str, Any]) -> tuple[list[str], list[str]]:
    bad, odd = [], []
    if f["ecc_uncorrected_volatile"]:
        bad.append(f"{f['ecc_uncorrected_volatile']} uncorrected ECC error(s) since driver load")
    elif f["ecc_uncorrected_aggregate"]:
        odd.append(f"{f['ecc_uncorrected_aggregate']} uncorrected ECC error(s) in its lifetime")
    if f["retired_pending"]:
        bad.append("page retirement pending (reset the GPU)")
    if f["remap_failed_or_pending"]:
        bad.append("row remapping failed or pending (reset the GPU)")
    if f["xid"]:
        bad.append(f"Xid event(s) {f['xid']}")
    if f["retired_pages"] and not bad:
        odd.append(f"{f['retired_pages']} retired page(s)")
    if f["persistence_mode"] in (False, 0, "Disabled", "disabled", "off"):
        odd.append("persistence mode off (slow, flaky first CUDA init)")
    return bad, odd


def _ours(nvml: dict[str, Any], procs: list[dict[str, Any]]) -> set[int]:
    """NVML pids (host pids) that are vLLM processes here, plus those a pod cannot attribute at all
    (nvml_pids: host pids mean nothing inside a container): unknown is not "foreign"."""
    vllm = {p["pid"] for p in procs}
    m = nvml_pids.pid_map(nvml, procs)
    return vllm | {n for n, local in m.local_of.items() if local in vllm or (local is None and n not in m.outside)}


def _holders(gpu: dict[str, Any]) -> set[int]:
    out: set[int] = set()
    for key, value in gpu.items():
        if "process" in key.lower() and isinstance(value, list):
            out |= {int(p["pid"]) for p in value if isinstance(p, dict) and isinstance(p.get("pid"), int)}
    return out


def _leaves(obj: Any, path: str) -> Any:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if "process" not in str(k).lower():
                yield from _leaves(v, f"{path}.{str(k).lower()}")
    else:
        yield path, obj


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


GATE_CHECKS = (GateCheck("gpu_health", "node", "gpu", check_gpu_health),)
