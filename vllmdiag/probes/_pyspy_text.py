"""Parse ``py-spy dump --subprocesses`` text output (pure).

``--json`` cannot be combined with ``--subprocesses`` (py-spy 0.4 prints only the root process as
JSON), yet on a machine with few cores one py-spy for a whole tree costs less CPU than one py-spy
per process (probes/stacks.py has the numbers). So that path reads the text form, which has been
stable since py-spy 0.3:

    Process 123: VLLM::EngineCore
    Python v3.11.7 (/usr/bin/python3.11)
    Parent Process 100: vllm serve ...

    Thread 123 (idle): "MainThread"
        Poller.poll (zmq/sugar/poll.py:106)
"""

from __future__ import annotations

import re
from typing import Any

_PROCESS = re.compile(r"^Process (\d+): ")
_THREAD = re.compile(r'^Thread (\S+) \(([^)]*)\)(?:: "(.*)")?\s*$')
_FRAME = re.compile(r"^ {4}(.+?) \((.+?)(?::(\d+))?\)\s*$")


def parse_tree_dump(text: str, max_frames: int = 96) -> dict[int, list[dict[str, Any]]]:
    """pid -> threads in the compact form of the JSON parser (frames innermost first, [name, file, line])."""
    out: dict[int, list[dict[str, Any]]] = {}
    threads: list[dict[str, Any]] | None = None
    thread: dict[str, Any] | None = None
    for line in text.splitlines():
        m = _PROCESS.match(line)
        if m:
            threads = out.setdefault(int(m.group(1)), [])
            thread = None
            continue
        if threads is None:
            continue
        m = _THREAD.match(line)
        if m:
            state = m.group(2)
            thread = {"name": m.group(3), "os_thread_id": _int(m.group(1)), "active": "active" in state,
                      "owns_gil": "gil" in state, "frames": []}
            threads.append(thread)
            continue
        m = _FRAME.match(line)
        if m and thread is not None and len(thread["frames"]) < max_frames:
            thread["frames"].append([m.group(1), m.group(2), int(m.group(3)) if m.group(3) else None])
    return out


def _int(text: str) -> int | None:
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None
