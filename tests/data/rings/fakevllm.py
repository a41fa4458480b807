"""A tiny stand-in vLLM process tree for ring tests: real processes, real titles, real shm mappings.

Run as `python fakevllm.py '<json spec>'`. Spec: {"prefix": "QX", "title": "EngineCore", "maps": [paths],
"flip": [path, offset, period_s] (optional: toggle one flag byte forever), "children": [specs]}.
Each process sets its title, maps its files (read-only unless it flips), starts its children,
prints READY once they are all ready, then waits for stdin EOF. Teardown kills the process group.
"""

from __future__ import annotations

import json
import mmap
import os
import subprocess
import sys
import time

import setproctitle


def main() -> None:
    spec = json.loads(sys.argv[1])
    setproctitle.setproctitle(f"{spec['prefix']}::{spec['title']}")
    maps = []
    flip = spec.get("flip")
    for path in spec.get("maps", []):
        writable = bool(flip and flip[0] == path)
        fd = os.open(path, os.O_RDWR if writable else os.O_RDONLY)
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        maps.append(mmap.mmap(fd, 0, flags=mmap.MAP_SHARED, prot=prot))
        os.close(fd)
    children = []
    for child in spec.get("children", []):
        child = {"prefix": spec["prefix"], **child}
        proc = subprocess.Popen([sys.executable, __file__, json.dumps(child)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"READY"
        children.append(proc)
    print("READY", flush=True)
    if flip:
        buf = maps[[p for p in spec["maps"]].index(flip[0])]
        while True:
            buf[flip[1]] ^= 1
            time.sleep(flip[2])
    sys.stdin.read()


if __name__ == "__main__":
    main()
