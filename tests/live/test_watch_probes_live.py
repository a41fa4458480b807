"""The live tests of tests/unit/test_watch_probes.py, which says what they check: these start something."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kubelet import Probe
from test_watch_probes import ROOT, listening  # noqa: F401 - shared with the pure half

from sim_fixtures import sim_state  # noqa: F401

# ---- the whole watcher against the simulator, probed like a kubelet ---------------------------
sim = pytest.importorskip("vllmdiag_sim.deployment")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs root")
NODE, GRACE_S = "probenode", 8.0


@needs_root
@pytest.mark.timeout(300)
def test_kubelet_sees_a_restart_as_alive_and_a_hang_fail_ready_then_live_after_the_evidence(
        sim_state: Path, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "vllmdiag", "watch", "--out", str(out), "--interval", "1", "--confirm", "2",
            "--metrics-port", "0", "--node", NODE, "--gone-grace", str(GRACE_S),
            "--select", f"VLLM_RPC_BASE_PATH={os.environ['VLLM_RPC_BASE_PATH']}"]
    log = tmp_path / "watch.log"
    with open(log, "w") as err:
        watcher = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, env={**os.environ, "PYTHONPATH": str(ROOT)})
    probes: list[Probe] = []
    try:
        host, port = listening(log, watcher)
        live = Probe(host, port, "/livez", period_s=0.25, timeout_s=2).start()
        ready = Probe(host, port, "/readyz", period_s=0.25, timeout_s=2).start()
        probes += [live, ready]
        with sim.Deployment.up(tp=2, fault="healthy"):
            assert ready.wait_for(lambda r: r.code == 200, 60), ready.results[-3:]
        with sim.Deployment.up(tp=2, fault="healthy-load") as dep:  # a restart: the old one gone, a new one
            dep_id = f"{NODE}:{dep.root_pid}"
            assert ready.wait_for(lambda r: r.code == 200 and f"deployment={dep_id}" in r.body, 60)
            time.sleep(3)
            assert live.failures() == [], "a restart and a healthy stream are alive"
            dep.inject("straggler", 1)
            injected = time.monotonic()
            first_ready = ready.wait_for(lambda r: r.code == 503, 30)
            assert first_ready is not None, ready.results[-3:]
            seen: list[tuple[Any, bool]] = []

            def evidence_on_disk(r: Any) -> bool:
                if r.code != 503:
                    return False
                path = re.search(r"evidence=(\S+)", r.body)
                seen.append((r, bool(path) and Path(path.group(1)).is_file()))  # type: ignore[union-attr]
                return True

            first_live = live.wait_for(evidence_on_disk, 90)
            assert first_live is not None, live.results[-3:]
            assert seen[0][1], f"the evidence is on disk when /livez first fails: {first_live.body}"
            assert first_ready.at < first_live.at
            assert "verdict=blocked" in first_live.body and "layer=gpu" in first_live.body
            assert f"pid={dep.worker_pid(1)}/rank=1" in first_live.body, first_live.body
            snap = json.loads(Path(re.search(r"evidence=(\S+)", first_live.body).group(1)).read_text())  # type: ignore[union-attr]
            assert snap["node"] == NODE
            assert first_ready.at - injected < 10, "readiness goes at the next pass (interval 1 s, 2-core slack)"
            # the state file triage reads, written beside the evidence
            from vllmdiag.watch.history import remembered

            lines = remembered(out)
            assert lines and dep_id in lines[0] and "layer gpu" in lines[0] and "rank 1" in lines[0], lines
        # The hung deployment removed (a kubelet's restart): alive within the grace, counted from the pass
        # that saw it gone (on a loaded machine that pass may come seconds after the processes ended).
        noticed = live.wait_for(lambda r: "no-deployment" in r.body, 60)
        assert noticed is not None and noticed.code == 200, noticed
        last_seen = noticed.at - int(re.search(r"\((\d+) s\)", noticed.body).group(1))  # type: ignore[union-attr]
        later = live.wait_for(lambda r: r.code == 503 and "no-deployment" in r.body, GRACE_S + 30)
        assert later is not None and later.at - last_seen >= GRACE_S - 1, "gone fails only past --gone-grace"
        assert not [r for r in live.results if noticed.at <= r.at < later.at and r.code != 200]
        watcher.send_signal(signal.SIGTERM)
        assert watcher.wait(timeout=60) == 0
        assert "Traceback" not in log.read_text()
    finally:
        for p in probes:
            p.stop()
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
