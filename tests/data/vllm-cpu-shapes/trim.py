"""Trim a real snapshot to one deployment (root pid + descendants) and a few passes."""
import json, sys
src, dst, root = sys.argv[1], sys.argv[2], int(sys.argv[3])
keep_passes = int(sys.argv[4]) if len(sys.argv) > 4 else 3
d = json.load(open(src))
procs = d["probes"]["processes"]["data"]["processes"]
kids = {}
for p in procs:
    kids.setdefault(p["ppid"], []).append(p["pid"])
mine, todo = set(), [root]
while todo:
    x = todo.pop(); mine.add(x); todo += kids.get(x, [])
PIDKEYS = ("pid", "owner_pid", "writer_pid")
LISTKEYS = ("pids", "mapped_by", "reader_pids", "holders")

def keep(e):
    if not isinstance(e, dict):
        return True
    for k in PIDKEYS:
        if isinstance(e.get(k), int) and e[k] not in mine and k == "pid":
            return False
    for k in LISTKEYS:
        v = e.get(k)
        if isinstance(v, list) and v and all(isinstance(x, int) for x in v) and not (set(v) & mine):
            return False
    return True

def walk(o):
    if isinstance(o, dict):
        out = {}
        for k, v in o.items():
            if isinstance(k, str) and k.isdigit() and int(k) not in mine and k not in ("0",):
                continue
            out[k] = walk(v)
        return out
    if isinstance(o, list):
        return [walk(e) for e in o if keep(e)]
    return o

d["probes"] = walk(d["probes"])
if "passes" in d:
    ps = d["passes"]
    if len(ps) > keep_passes:
        idx = sorted({round(i * (len(ps) - 1) / (keep_passes - 1)) for i in range(keep_passes)})
        ps = [ps[i] for i in idx]
    d["passes"] = [walk(p) for p in ps]
json.dump(d, open(dst, "w"), indent=None, separators=(",", ":"))
print(len(json.dumps(d)), sorted(mine))
