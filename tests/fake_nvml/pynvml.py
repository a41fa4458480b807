"""A fake ``pynvml`` for tests without a GPU (put first on sys.path via $VLLMDIAG_FAKE_NVML).

Driven by $FAKE_NVML_CONFIG (JSON): ``{"gpus": [{"util": 100, "power_mw": 150000, "limit_mw": 700000,
"pids": [123], "minor": 0, "xids": [79], "ecc_unc": 0, "pending": false, "nvlink": true}], "hang": ["nvmlDeviceGetPowerUsage"],
"hang_gpu": 1, "raise": ["nvmlDeviceGetTemperature"], "no_driver": false}``. ``hang`` blocks forever
in the named calls (on ``hang_gpu`` only, when given), as a wedged driver does; ``raise`` raises
NVMLError_NotSupported from them.
"""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace
from typing import Any

CFG: dict[str, Any] = json.loads(os.environ.get("FAKE_NVML_CONFIG") or '{"gpus": [{}]}')

NVML_TEMPERATURE_GPU = 0
NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 0, 1
NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 0, 1
NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1
NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA = 2, 3
nvmlEventTypeXidCriticalError = 8


class NVMLError(Exception):
    def __init__(self, value: int = 999) -> None:
        super().__init__(f"fake NVML error {value}")
        self.value = value


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's name)
    def __init__(self) -> None:
        super().__init__(3)


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    def __init__(self) -> None:
        super().__init__(12)


def _gpu(h: int) -> dict[str, Any]:
    return CFG["gpus"][h]


def _call(name: str, h: int | None = None) -> None:
    if name in CFG.get("hang", []) and (CFG.get("hang_gpu") is None or CFG.get("hang_gpu") == h):
        while True:
            time.sleep(1)
    if name in CFG.get("raise", []):
        raise NVMLError_NotSupported()


def nvmlInit() -> None:  # noqa: N802
    if CFG.get("no_driver"):
        raise NVMLError_LibraryNotFound()


def nvmlShutdown() -> None:  # noqa: N802
    pass


def nvmlDeviceGetCount() -> int:  # noqa: N802
    return len(CFG["gpus"])


def nvmlSystemGetDriverVersion() -> str:  # noqa: N802
    return "550.00-fake"


def nvmlSystemGetNVMLVersion() -> str:  # noqa: N802
    return "12.550-fake"


def nvmlSystemGetCudaDriverVersion() -> int:  # noqa: N802
    return 12040


def nvmlDeviceGetHandleByIndex(i: int) -> int:  # noqa: N802
    return i


def nvmlDeviceGetName(h: int) -> str:  # noqa: N802
    return "Fake H100"


def nvmlDeviceGetUUID(h: int) -> str:  # noqa: N802
    return f"GPU-fake-{h}"


def nvmlDeviceGetPciInfo(h: int) -> Any:  # noqa: N802
    return SimpleNamespace(busId=f"00000000:{h + 1:02x}:00.0")


def nvmlDeviceGetMinorNumber(h: int) -> int:  # noqa: N802
    return int(_gpu(h).get("minor", h))  # /dev/nvidia<minor>


def nvmlDeviceGetUtilizationRates(h: int) -> Any:  # noqa: N802
    _call("nvmlDeviceGetUtilizationRates", h)
    return SimpleNamespace(gpu=_gpu(h).get("util", 0), memory=5)


def nvmlDeviceGetMemoryInfo(h: int) -> Any:  # noqa: N802
    return SimpleNamespace(used=70 << 30, total=80 << 30, free=10 << 30)


def nvmlDeviceGetPowerUsage(h: int) -> int:  # noqa: N802
    _call("nvmlDeviceGetPowerUsage", h)
    return int(_gpu(h).get("power_mw", 100000))


def nvmlDeviceGetEnforcedPowerLimit(h: int) -> int:  # noqa: N802
    return int(_gpu(h).get("limit_mw", 700000))


def nvmlDeviceGetTemperature(h: int, sensor: int) -> int:  # noqa: N802
    _call("nvmlDeviceGetTemperature", h)
    return 45


def nvmlDeviceGetCurrentClocksEventReasons(h: int) -> int:  # noqa: N802
    return 0


def nvmlDeviceGetTotalEccErrors(h: int, kind: int, counter: int) -> int:  # noqa: N802
    return int(_gpu(h).get("ecc_unc", 0)) if kind == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else 0


def nvmlDeviceGetRetiredPages(h: int, cause: int) -> list[int]:  # noqa: N802
    return []


def nvmlDeviceGetRetiredPagesPendingStatus(h: int) -> int:  # noqa: N802
    return int(bool(_gpu(h).get("pending", False)))


def nvmlDeviceGetRemappedRows(h: int) -> tuple[int, int, int, int]:  # noqa: N802
    raise NVMLError_NotSupported()


def nvmlDeviceGetNvLinkState(h: int, link: int) -> int:  # noqa: N802
    if not _gpu(h).get("nvlink"):
        raise NVMLError_NotSupported()
    return 1 if link < 2 else 0


def nvmlDeviceGetNvLinkErrorCounter(h: int, link: int, counter: int) -> int:  # noqa: N802
    return 1


def nvmlEventSetCreate() -> list[int]:  # noqa: N802
    return []


def nvmlDeviceRegisterEvents(h: int, types: int, events: list[int]) -> None:  # noqa: N802
    events.extend(_gpu(h).get("xids", []))


def nvmlEventSetWait(events: list[int], timeout_ms: int) -> Any:  # noqa: N802
    if not events:
        raise NVMLError(10)  # NVML_ERROR_TIMEOUT
    return SimpleNamespace(eventData=events.pop(0))


def nvmlEventSetFree(events: list[int]) -> None:  # noqa: N802
    pass


def nvmlDeviceGetPersistenceMode(h: int) -> int:  # noqa: N802
    return 1


def nvmlDeviceGetComputeProcesses(h: int) -> list[Any]:  # noqa: N802
    return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in _gpu(h).get("pids", [])]
