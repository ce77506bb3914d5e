#!/usr/bin/env bash
# Builds libcupti_referee.so on the GPU machine (CUDA toolkit with CUPTI) into $1 (default: here).
# The activity record types are versioned (CUpti_ActivityKernel9, ...): it uses the newest each
# header declares, the layout the installed CUPTI writes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd); out=${1:-$here}
cuda=${CUDA_HOME:-/usr/local/cuda}
inc=$(dirname "$(find "$cuda/" "$cuda/extras/CUPTI/include" -name cupti_activity.h 2>/dev/null | head -1)")
lib=$(dirname "$(find "$cuda/" -name 'libcupti.so' 2>/dev/null | head -1)")
newest() { grep -ho "typedef struct PACKED_ALIGNMENT {\|} $1[0-9]*;" "$inc"/cupti_activity*.h | grep -o "$1[0-9]*" | sort -V | tail -1; }
k=$(newest CUpti_ActivityKernel); s=$(newest CUpti_ActivityMemset); c=$(newest CUpti_ActivityMemcpy)
echo "cupti_referee: $inc $lib $k $s $c"
gcc -O2 -shared -fPIC -o "$out/libcupti_referee.so" "$here/referee.c" -I"$inc" -I"$cuda/include" \
  -DKERNEL_RECORD="$k" -DMEMSET_RECORD="$s" -DMEMCPY_RECORD="$c" -L"$lib" -Wl,-rpath,"$lib" -lcupti -lpthread
