"""The nvml probe through its child process, with a fake pynvml at the import boundary."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from vllmdiag.context import Context
from vllmdiag.probe import Partial, Skip
from vllmdiag.probes import nvml

FAKE = str(Path(__file__).parent.parent / "fake_nvml")


def run(monkeypatch: pytest.MonkeyPatch, cfg: dict[str, object], timeout_s: float = 3.0) -> object:
    monkeypatch.setenv("VLLMDIAG_FAKE_NVML", FAKE)
    monkeypatch.setenv("FAKE_NVML_CONFIG", json.dumps(cfg))
    return nvml.collect(Context(options={"nvml_timeout_s": timeout_s}))


def test_fields_per_gpu_and_a_raising_query_loses_one_field(monkeypatch: pytest.MonkeyPatch) -> None:
    out = run(monkeypatch, {"gpus": [{"util": 100, "power_mw": 150000, "pids": [4242], "xids": [79], "nvlink": True}, {}],
                            "raise": ["nvmlDeviceGetTemperature"]})
    assert isinstance(out, dict) and out["child"]["status"] == "ok" and out["driver_version"] == "550.00-fake"
    g0, g1 = out["gpus"]
    assert (g0["util_pct"], g0["power_w"], g0["power_limit_w"]) == (100, 150.0, 700.0)
    assert g0["temperature_c"] is None and g0["memory_used_bytes"] == 70 << 30  # one field lost, not the GPU
    assert g0["processes"] == [{"pid": 4242, "used_memory_bytes": 1 << 30}] and g0["xid_events"] == [79]
    assert g0["nvlink_errors"] == {"crc_flit": 2, "crc_data": 2, "replay": 2, "recovery": 2} and g1["nvlink_errors"] is None
    assert g0["remapped_rows"] is None and g0["persistence_mode"] is True


def test_a_hanging_query_is_killed_at_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.monotonic()
    out = run(monkeypatch, {"gpus": [{}, {}], "hang": ["nvmlDeviceGetPowerUsage"], "hang_gpu": 1}, timeout_s=1.0)
    assert time.monotonic() - t0 < 3.0
    assert isinstance(out, Partial) and "timeout" in out.reason and "GPU 1" in out.reason
    assert out.data["child"]["status"] == "timeout" and out.data["hung_gpu"] == 1
    assert [g["index"] for g in out.data["gpus"]] == [0]  # the GPU read before the hang is kept


def test_no_driver_is_a_skip_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(Skip, match="no NVIDIA GPU or driver"):
        run(monkeypatch, {"gpus": [], "no_driver": True})


def test_real_nvml_without_a_gpu_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLMDIAG_FAKE_NVML", raising=False)
    try:
        out = nvml.collect(Context())
    except Skip as exc:
        assert "NVML" in exc.reason or "pynvml" in exc.reason
    else:  # a machine with a GPU: real data
        assert out["gpus"] if isinstance(out, dict) else out.data.get("gpus") is not None


def test_parse_child_tolerates_a_cut_line() -> None:
    text = '{"meta":{"count":2}}\n{"begin":0}\n{"gpu":{"index":0}}\n{"begin":1}\n{"gpu":{"ind'
    assert nvml.parse_child(text) == {"gpus": [{"index": 0}], "count": 2, "hung_gpu": 1}


def test_no_driver_in_sight_skips_without_starting_the_child(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No /proc/driver/nvidia and no device node: the probe says so and starts nothing (no interpreter
    to learn it, no chance for NVIDIA's libraries to run nvidia-modprobe on a node we only look at)."""
    monkeypatch.delenv("VLLMDIAG_FAKE_NVML", raising=False)
    monkeypatch.setattr(nvml, "DRIVER_DEVICES", (str(tmp_path / "nvidiactl"), str(tmp_path / "dxg")))
    ctx = Context(proc_root=tmp_path / "proc")
    started: list[object] = []
    monkeypatch.setattr(ctx, "run", lambda *a, **k: started.append(a))
    with pytest.raises(Skip, match="no NVIDIA GPU or driver here.*NVML not started"):
        nvml.collect(ctx)
    assert not started


@pytest.mark.parametrize("sign", ["proc", "device"])
def test_any_driver_sign_starts_the_child(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sign: str) -> None:
    """A loaded module (/proc/driver/nvidia) or a device node alone is enough to ask NVML itself."""
    monkeypatch.delenv("VLLMDIAG_FAKE_NVML", raising=False)
    devices = (str(tmp_path / "nvidiactl"), str(tmp_path / "dxg"))
    monkeypatch.setattr(nvml, "DRIVER_DEVICES", devices)
    (tmp_path / "proc").mkdir()
    if sign == "proc":
        (tmp_path / "proc" / "driver" / "nvidia").mkdir(parents=True)
    else:
        Path(devices[0]).write_text("")
    ctx = Context(proc_root=tmp_path / "proc")
    started: list[list[str]] = []

    def run(argv: list[str], *args: object, **kwargs: object) -> object:
        started.append(argv)
        raise RuntimeError("child started")

    monkeypatch.setattr(ctx, "run", run)
    with pytest.raises(RuntimeError, match="child started"):
        nvml.collect(ctx)
    assert started and started[0][-1] == "vllmdiag.probes._nvml_child"
