"""A bounded CPU hog: busy-loop processes that load the machine while tests or benchmarks run.

Issue 15 (item 15): under load a healthy endpoint missed the 0.25 s ZMTP greeting wait and became a
false finding. The suite must pass with a hog beside it, so this starts N busy-looping children,
each of which exits by itself after `seconds` or as soon as its parent is gone (it never outlives
the test run that started it). Used by tests/conftest.py (`pytest --cpu-hog N`) and the `cpu_hog`
fixture; runnable alone: `python3 bench/cpu_hog.py --procs 1 --seconds 60`.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time

MAX_SECONDS = 3600.0
# The child: spin; every ~50 ms check the deadline and whether the parent still exists.
_CHILD = (
    "import os, time\n"
    "end = time.monotonic() + {seconds}\n"
    "parent = {parent}\n"
    "while time.monotonic() < end and os.getppid() == parent:\n"
    "    t = time.monotonic() + 0.05\n"
    "    while time.monotonic() < t:\n"
    "        pass\n"
)


def start(procs: int = 1, seconds: float = 600.0) -> list[subprocess.Popen[bytes]]:
    """Start `procs` busy-loop children (each bounded by `seconds` and by our own life)."""
    seconds = max(0.1, min(float(seconds), MAX_SECONDS))
    code = _CHILD.format(seconds=seconds, parent=os.getpid())
    return [subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True) for _ in range(max(0, procs))]


def stop(hogs: list[subprocess.Popen[bytes]]) -> None:
    """Kill exactly the children we started, by their own pid, and reap them."""
    for proc in hogs:
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for proc in hogs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--procs", type=int, default=1, help="busy-loop processes (default 1: one core)")
    p.add_argument("--seconds", type=float, default=60.0, help=f"how long (at most {MAX_SECONDS:.0f})")
    args = p.parse_args(argv)
    hogs = start(args.procs, args.seconds)
    try:
        while any(h.poll() is None for h in hogs):
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        stop(hogs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
