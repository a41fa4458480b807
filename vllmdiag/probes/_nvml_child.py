"""NVML queries, run as ``python -m vllmdiag.probes._nvml_child`` by the ``nvml`` probe.

A wedged driver call cannot be interrupted from a Python thread, so NVML lives in this child and
the probe kills it at its deadline. Output is JSON lines, flushed as they happen, so whatever
finished before a hang survives it: ``{"meta": ...}``, then per GPU ``{"begin": i}`` and
``{"gpu": {...}}``, or one ``{"skip": reason}``. Each field is independent: ``None`` when NVML
says not supported or fails (the Glances way). ``$VLLMDIAG_FAKE_NVML`` names a directory put first
on ``sys.path``: tests supply a fake ``pynvml`` there; the code path is otherwise the same.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

if os.environ.get("VLLMDIAG_FAKE_NVML"):
    sys.path.insert(0, os.environ["VLLMDIAG_FAKE_NVML"])

MAX_NVLINKS = 18


def emit(obj: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def main() -> int:
    try:
        import pynvml as nv
    except ImportError:
        emit({"skip": "nvidia-ml-py (pynvml) is not installed; pip install nvidia-ml-py"})
        return 0
    try:
        nv.nvmlInit()
    except nv.NVMLError as exc:
        emit({"skip": f"NVML unavailable (no NVIDIA GPU or driver here): {exc}"})
        return 0
    try:
        get = getter(nv)
        count = nv.nvmlDeviceGetCount()
        emit({"meta": {"driver_version": _text(get(nv.nvmlSystemGetDriverVersion)), "count": count,
                       "nvml_version": _text(get(nv.nvmlSystemGetNVMLVersion)),
                       "cuda_driver_version": get(nv.nvmlSystemGetCudaDriverVersion)}})
        for i in range(count):
            emit({"begin": i})
            emit({"gpu": query_gpu(nv, get, i)})
    finally:
        try:
            nv.nvmlShutdown()
        except nv.NVMLError:
            pass
    return 0


def getter(nv: Any) -> Callable[..., Any]:
    def get(fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except nv.NVMLError:
            return None
    return get


def query_gpu(nv: Any, get: Callable[..., Any], index: int) -> dict[str, Any]:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    util, mem = get(nv.nvmlDeviceGetUtilizationRates, h), get(nv.nvmlDeviceGetMemoryInfo, h)
    power, limit = get(nv.nvmlDeviceGetPowerUsage, h), get(nv.nvmlDeviceGetEnforcedPowerLimit, h)
    reasons = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    remap = get(nv.nvmlDeviceGetRemappedRows, h)
    pci = get(nv.nvmlDeviceGetPciInfo, h)
    return {
        "index": index, "name": _text(get(nv.nvmlDeviceGetName, h)), "uuid": _text(get(nv.nvmlDeviceGetUUID, h)),
        "pci_bus_id": _text(getattr(pci, "busId", None)),
        # The N of /dev/nvidiaN: how a process inside a pod is tied to this GPU (NVML's pids are the host's).
        "minor_number": get(nv.nvmlDeviceGetMinorNumber, h),
        "util_pct": getattr(util, "gpu", None), "mem_util_pct": getattr(util, "memory", None),
        "power_w": None if power is None else round(power / 1000, 1),
        "power_limit_w": None if limit is None else round(limit / 1000, 1),
        "memory_used_bytes": getattr(mem, "used", None), "memory_total_bytes": getattr(mem, "total", None),
        "temperature_c": get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
        "clocks_event_reasons": get(reasons, h),
        "ecc_uncorrected_volatile": get(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                        nv.NVML_VOLATILE_ECC),
        "ecc_corrected_volatile": get(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                      nv.NVML_VOLATILE_ECC),
        "ecc_uncorrected_aggregate": get(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                         nv.NVML_AGGREGATE_ECC),
        "retired_pages": _retired(nv, get, h),
        "retired_pages_pending": _bool(get(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)),
        "remapped_rows": None if remap is None else dict(zip(("corrected", "uncorrected", "pending", "failure"),
                                                             [int(remap[0]), int(remap[1]), bool(remap[2]), bool(remap[3])],
                                                             strict=True)),
        "nvlink_errors": _nvlink(nv, get, h),
        "xid_events": _xids(nv, get, h),
        "persistence_mode": _bool(get(nv.nvmlDeviceGetPersistenceMode, h)),
        "processes": _procs(get(nv.nvmlDeviceGetComputeProcesses, h)),
    }


def _retired(nv: Any, get: Callable[..., Any], h: Any) -> dict[str, int] | None:
    sbe = get(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
    dbe = get(nv.nvmlDeviceGetRetiredPages, h, nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
    if sbe is None and dbe is None:
        return None
    return {"single_bit": len(sbe or []), "double_bit": len(dbe or [])}


def _nvlink(nv: Any, get: Callable[..., Any], h: Any) -> dict[str, int] | None:
    """Error counters summed over active links; None when the GPU has no NVLink."""
    counters = {"crc_flit": nv.NVML_NVLINK_ERROR_DL_CRC_FLIT, "crc_data": nv.NVML_NVLINK_ERROR_DL_CRC_DATA,
                "replay": nv.NVML_NVLINK_ERROR_DL_REPLAY, "recovery": nv.NVML_NVLINK_ERROR_DL_RECOVERY}
    out: dict[str, int] | None = None
    for link in range(MAX_NVLINKS):
        if get(nv.nvmlDeviceGetNvLinkState, h, link) != 1:
            continue
        out = out or dict.fromkeys(counters, 0)
        for name, counter in counters.items():
            out[name] += get(nv.nvmlDeviceGetNvLinkErrorCounter, h, link, counter) or 0
    return out


def _xids(nv: Any, get: Callable[..., Any], h: Any) -> list[int] | None:
    """Xid events pending right now (NVML keeps no history; dmesg has it). None: not readable."""
    try:
        events = nv.nvmlEventSetCreate()
        nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, events)
    except nv.NVMLError:
        return None
    out = []
    for _ in range(16):
        data = get(nv.nvmlEventSetWait, events, 0)
        if data is None:
            break
        out.append(int(data.eventData))
    get(nv.nvmlEventSetFree, events)
    return out


def _procs(raw: Any) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    return [{"pid": int(p.pid), "used_memory_bytes": getattr(p, "usedGpuMemory", None)} for p in raw]


def _bool(value: Any) -> bool | None:
    return None if value is None else bool(value)


def _text(value: Any) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


if __name__ == "__main__":
    sys.exit(main())
