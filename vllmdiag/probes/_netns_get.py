"""GET a few paths from an HTTP server that lives in another network namespace (a container's).

Run as a short-lived child by the ``http`` probe: it joins the target's network namespace with
``setns`` (needs CAP_SYS_ADMIN, which a root triage on the host has), does the same read-only GETs
the probe does in its own namespace (/health, /metrics), prints one JSON line and exits. Joining a
namespace changes only this child; the caller bounds it with ``ctx.run`` (killed at its deadline).
Not a probe (leading underscore): the registry skips it.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any

CLONE_NEWNET = 0x40000000


def join_netns(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        if hasattr(os, "setns"):  # Python 3.12+
            os.setns(fd, CLONE_NEWNET)
            return
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    netns, host, port, timeout = argv[0], argv[1], int(argv[2]), float(argv[3])
    paths = [p for p in argv[4:] if p in ("/health", "/metrics")]  # read-only paths only
    try:
        join_netns(netns)
    except OSError as exc:
        print(json.dumps({"error": f"setns {netns}: {exc.strerror or exc}"}))
        return 0
    from vllmdiag.probes.http import get

    out: list[dict[str, Any]] = [get(host, port, p, timeout / max(1, len(paths)), keep_body=p == "/metrics")
                                 for p in paths]
    print(json.dumps({"results": out}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
