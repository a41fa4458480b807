"""The watcher as a kubelet's probe on the real `vllm serve` (issue 34): measured, not asserted.

    python bench/bench_liveness.py [--interval 2] [--confirm 5] [--load 30] [--json FILE]

Runs tests/liveness_scenario.py once (real server TP=1 from tests/real_vllm, under its shared lock:
start, load, restart, load, a hang held in the forward) with kubelet-style probe loops on /livez
and /readyz every second, and prints: time from the hang to the first /readyz 503 and /livez 503
(and to the kubelet's restart at failureThreshold 3), false 503s before the hang, whether the
snapshot was on disk at the first /livez 503, and the watcher's CPU (its own and its pass children's,
percent of one core) under load. docs/liveness.md keeps the numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--confirm", type=float, default=5.0)
    ap.add_argument("--load", type=float, default=30.0, help="seconds of load before the restart (half after)")
    ap.add_argument("--period", type=float, default=1.0, help="the probes' periodSeconds")
    ap.add_argument("--json", type=Path, help="write the measurements here too")
    args = ap.parse_args()
    sys.path.insert(0, str(TESTS))
    import liveness_scenario

    with tempfile.TemporaryDirectory(prefix="bench-liveness-") as tmp:
        m = liveness_scenario.run(Path(tmp), interval_s=args.interval, confirm_s=args.confirm, load_s=args.load,
                                  period_s=args.period, note=lambda s: print(s, file=sys.stderr, flush=True))
    keys = ["interval_s", "confirm_s", "period_s", "start_s", "restart_s", "ready_again_after_restart_s",
            "first_load_completions", "second_load_completions", "livez_503_before_hang",
            "livez_503_while_waiting_for_the_lock", "livez_no_answer_in_1s_before_hang", "livez_probes_before_hang",
            "livez_fired_before_hang", "readyz_false_503", "readyz_no_answer_in_1s_under_load",
            "readyz_503_after_hang_s", "livez_503_after_hang_s", "livez_fired_after_hang_s",
            "evidence_on_disk_at_first_livez_503", "first_load_watcher_cpu_pct", "second_load_watcher_cpu_pct"]
    for k in keys:
        print(f"{k:40s} {m.get(k)}")
    print(f"{'livez_body':40s} {m.get('livez_body')}")
    if args.json:
        args.json.write_text(json.dumps(m, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
