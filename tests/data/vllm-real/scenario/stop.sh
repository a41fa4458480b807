#!/bin/bash
# usage: stop.sh SCEN -> records the psm segments and ipc socket files its processes hold, kills its
# process group, then removes those files (only those)
ST=/tmp/vllm-scenarios/state-$1; ROOT=$(cat $ST/root_pid)
PIDS=$(pgrep -g $ROOT)
for p in $PIDS; do grep -o '/dev/shm/psm_[0-9a-f]*' /proc/$p/maps 2>/dev/null; done | sort -u >> $ST/segments
python3 - $PIDS >> $ST/sockfiles <<'PY'
import os, sys
inodes = set()
for pid in sys.argv[1:]:
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            t = os.readlink(f"/proc/{pid}/fd/{fd}")
            if t.startswith("socket:["): inodes.add(t[8:-1])
    except OSError: pass
for line in open("/proc/net/unix").read().splitlines()[1:]:
    parts = line.split()
    if len(parts) >= 8 and parts[6] in inodes and parts[7].startswith("/tmp/"): print(parts[7])
PY
kill -CONT -- -$ROOT 2>/dev/null; kill -TERM -- -$ROOT 2>/dev/null
for i in $(seq 1 20); do pgrep -g $ROOT >/dev/null || break; sleep 0.25; done
kill -KILL -- -$ROOT 2>/dev/null
for i in $(seq 1 20); do pgrep -g $ROOT >/dev/null || break; sleep 0.25; done
for f in $(sort -u $ST/segments $ST/sockfiles); do [ -e $f ] && rm -f $f && echo "removed $f"; done
echo "left in group: $(pgrep -g $ROOT | wc -l)"
