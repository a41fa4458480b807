"""The pure tests of tests/live/test_rings_probe_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.context import Context
from vllmdiag.model import Snapshot
from vllmdiag.runtime.runner import collect_snapshot

RINGS = Path(__file__).parent.parent / "data" / "rings"

DEV_SHM = Path("/dev/shm")


def write_fixture(name: str, dest: Path) -> Path:
    """Materialise a compact real fixture as a sparse file (only its non-zero runs are written)."""
    d = json.loads((RINGS / f"{name}.json").read_text())
    fd = os.open(dest, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, d["size_bytes"])
        for off, hx in d["extents"]:
            os.pwrite(fd, bytes.fromhex(hx), off)
    finally:
        os.close(fd)
    return dest


@pytest.fixture(name="segments")
def segments_fixture() -> Iterator[Callable[..., Path]]:
    """Factory for /dev/shm/psm_* segments this test owns; all removed at teardown, even on failure."""
    made: list[Path] = []

    def make(fixture: str | None = None, data: bytes | None = None, size: int | None = None) -> Path:
        path = DEV_SHM / f"psm_{secrets.token_hex(4)}"
        made.append(path)
        if fixture:
            return write_fixture(fixture, path)
        with open(path, "xb") as f:
            f.write(data or b"")
            if size:
                f.truncate(size)
        return path

    yield make
    for p in made:
        p.unlink(missing_ok=True)


def deployment_spec(rpc: Path, response: Path, bcast: Path) -> dict[str, Any]:
    """EngineCore + Worker_TP0..3 mapping the rings the way vLLM 0.33 does (1.10)."""
    workers = [{"title": f"Worker_TP{r}", "maps": [str(rpc), str(bcast)] + ([str(response)] if r == 0 else [])}
               for r in range(4)]
    return {"title": "EngineCore", "maps": [str(rpc), str(response)], "children": workers}


def collect(prefix: str, **options: Any) -> Snapshot:
    ctx = Context(title_prefix=prefix, options=dict(options))
    return collect_snapshot(ctx, probes=["rings"], budget_s=6.0)


def test_skipped_without_the_shm_probe() -> None:
    from vllmdiag.probe import Skip
    from vllmdiag.probes import rings

    with pytest.raises(Skip, match="shm probe"):
        rings.collect(Context())
