"""Trim a real snapshot to one deployment (root pid + descendants) and a few of its passes."""

import json
import sys
from pathlib import Path
from typing import Any

src, dst, root = sys.argv[1], sys.argv[2], int(sys.argv[3])
keep_passes = int(sys.argv[4]) if len(sys.argv) > 4 else 3
d = json.loads(Path(src).read_text())
kids: dict[int, list[int]] = {}
for p in d["probes"]["processes"]["data"]["processes"]:
    kids.setdefault(p["ppid"], []).append(p["pid"])
mine: set[int] = set()
todo = [root]
while todo:
    x = todo.pop()
    mine.add(x)
    todo += kids.get(x, [])
LISTKEYS = ("pids", "mapped_by", "reader_pids", "holders")


def keep(e: Any) -> bool:
    if not isinstance(e, dict):
        return True
    if isinstance(e.get("pid"), int) and e["pid"] not in mine:
        return False
    for k in LISTKEYS:
        v = e.get(k)
        if isinstance(v, list) and v and all(isinstance(x, int) for x in v) and not (set(v) & mine):
            return False
    return True


def walk(o: Any) -> Any:
    if isinstance(o, dict):
        return {k: walk(v) for k, v in o.items() if not (isinstance(k, str) and k.isdigit() and k != "0"
                                                         and int(k) not in mine)}
    if isinstance(o, list):
        return [walk(e) for e in o if keep(e)]
    return o


d["probes"] = walk(d["probes"])
if "passes" in d:
    ps = d["passes"]
    if len(ps) > keep_passes:
        ps = [ps[i] for i in sorted({round(i * (len(ps) - 1) / (keep_passes - 1)) for i in range(keep_passes)})]
    d["passes"] = [walk(p) for p in ps]
Path(dst).write_text(json.dumps(d, separators=(",", ":")))
print(len(json.dumps(d)), sorted(mine))
