#!/bin/bash
# usage: capture.sh SCEN -> vllmdiag collect --json + triage --json + py-spy dump --json of every process
SCEN=$1; ST=/tmp/vllm-scenarios/state-$SCEN; OUT=/tmp/vllm-scenarios/out-$SCEN; ROOT=$(cat $ST/root_pid)
mkdir -p $OUT; cd /tmp
vllmdiag collect --json --pid $ROOT > $OUT/collect.json; echo "collect rc=$?"
vllmdiag triage --json --pid $ROOT > $OUT/triage.json; echo "triage rc=$?"
for p in $(pgrep -g $ROOT); do
  t=$(tr '\0' ' ' < /proc/$p/cmdline | cut -c1-40)
  case "$t" in *resource_tracker*) continue;; esac
  py-spy dump --json --pid $p > $OUT/pyspy-$p.json 2>$OUT/pyspy-$p.err; echo "pyspy $p ($t) rc=$?"
done
