"""PID 1 of a simulated node: mounts a private /dev/shm, runs the API server, reaps orphans.

Run by `unshare --pid --mount --fork --mount-proc`; when it exits the kernel kills every
process left in the namespace, and the private tmpfs (with any `psm_*` in it) goes away.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

STAY_ENV = "VLLMDIAG_SIM_NSINIT_STAY"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllmdiag_sim.nsinit")
    parser.add_argument("--shm-size", required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={args.shm_size},mode=1777", "tmpfs", "/dev/shm"],
                   check=True)
    child = subprocess.Popen(command)
    # As PID 1 we inherit every orphan (e.g. workers after their EngineCore was killed).
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 0
        # Like a container entrypoint shell that runs more than the server (vLLM #55510), the
        # "ns" shape's init outlives the API server and keeps reaping until the namespace is empty.
        if pid == child.pid and not os.environ.get(STAY_ENV):
            return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
