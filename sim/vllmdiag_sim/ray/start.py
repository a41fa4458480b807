"""The sim's `ray start --head` followed by the driver: the raylet is started as a daemon (double
fork, its own session), so, like after a real `ray start`, its parent is the node's init and not the
`vllm serve` that runs next; then this process becomes the given command (exec).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from vllmdiag_sim import runtime

READY_TIMEOUT_S = 15.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllmdiag_sim.ray.start")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--gcs-address", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    base = runtime.deployment_dir()
    if os.fork() == 0:  # the daemon's parent exits at once: the raylet is reparented to init
        os.setsid()
        env = {**os.environ, "SPT_NOENV": "1"}  # Ray keeps environ readable
        subprocess.Popen([sys.executable, "-m", "vllmdiag_sim.ray.raylet", "--socket", args.socket,
                          "--gcs-address", args.gcs_address], stdin=subprocess.DEVNULL, env=env)
        os._exit(0)
    os.wait()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while base is not None and not (Path(base) / "acks" / "raylet-ready").exists():
        if time.monotonic() > deadline:
            print("the sim raylet did not start", file=sys.stderr)
            return 1
        time.sleep(0.02)
    os.execvp(command[0], command)
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
