#!/bin/bash
# Builds the six probes and runs every probe/variant/mode twice, each under `timeout 60`.
# Output: $OUT/<probe>.txt (stdout+stderr and the exit code of each run), $OUT/device.txt.
cd "$(dirname "$0")"
B=/tmp/probes; mkdir -p $B
CU=/usr/local/cuda
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nvidia-smi | head -4
  $CU/bin/nvcc --version | tail -2; gcc --version | head -1
  for f in probe_plain_vs_captured probe_blocking_sync probe_external_node probe_destroy_ipc probe_two_events; do
    echo "+ gcc -O2 $f.c -I$CU/include -L$CU/lib64 -lcudart -lpthread -o $B/$f"
    gcc -O2 $f.c -I$CU/include -L$CU/lib64 -lcudart -lpthread -o $B/$f || echo "BUILD FAILED $f"
  done
  echo "+ nvcc -O2 -arch=sm_90 probe_wait_full_queue.cu -lpthread -o $B/probe_wait_full_queue"
  $CU/bin/nvcc -O2 -arch=sm_90 probe_wait_full_queue.cu -lpthread -o $B/probe_wait_full_queue || echo "BUILD FAILED probe_wait_full_queue"
} > $OUT/device.txt 2>&1
export LD_LIBRARY_PATH=$CU/lib64:$LD_LIBRARY_PATH
run() { # file, args...
  local p=$1; shift
  for n in 1 2; do
    if (( SECONDS > 465 )); then echo "== $p $* (run $n): SKIPPED, out of time" >> $OUT/$p.txt; continue; fi
    local t0=$SECONDS
    echo "== $p $* (run $n)" >> $OUT/$p.txt
    timeout -k 5 60 $B/$p "$@" >> $OUT/$p.txt 2>&1
    echo "rc=$? (${SECONDS}s total, $((SECONDS - t0))s)" >> $OUT/$p.txt
  done
}
for m in g l; do for v in r o e f; do run probe_plain_vs_captured $m 2000 $v; done; done
for m in g l; do for v in a af r e ab; do run probe_two_events $m 2000 $v; done; done
for m in g l; do for v in a e b; do run probe_blocking_sync $m 2000 $v; done; done
for m in g l; do for v in a e b; do run probe_wait_full_queue $m 40 $v 8000; done; done
for m in g l; do for v in q s w; do for p in 2 3 4; do run probe_external_node $m 2000 $v $p; done; done; done
for m in g l; do for v in d i; do for p in 4 3; do run probe_destroy_ipc $m 2000 $v $p; done; done; done
echo "finished at ${SECONDS}s" >> $OUT/device.txt
