#!/bin/bash
# usage: run.sh SCEN [PORT] -> starts the TP=4 deployment in its own session, waits until ready, prints root pid
# SCEN: healthy | worker_stuck | engine_noread | output_stuck (see the docstring of ./vllm)
# VENV: a venv with vllm==0.33.0 (--no-deps) + torch CPU + the import chain (see ../README.md)
HERE=$(cd "$(dirname "$0")" && pwd); VENV=${VENV:-/tmp/vllm-venv}
SCEN=$1; PORT=${2:-18123}
export SCEN SCEN_STATE=/tmp/vllm-scenarios/state-$SCEN
rm -rf $SCEN_STATE; mkdir -p $SCEN_STATE
cd /tmp
setsid $VENV/bin/python $HERE/vllm serve m --tensor-parallel-size 4 --port $PORT \
  > $SCEN_STATE/out.log 2>&1 < /dev/null &
echo $! > $SCEN_STATE/root_pid
for i in $(seq 1 120); do [ -f $SCEN_STATE/ready ] && break; sleep 0.5; done
cat $SCEN_STATE/root_pid
