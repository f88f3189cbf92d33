#!/usr/bin/env bash
# Thirty-first session, call 1: the full GPU suite on the exact committed file (the thirtieth session's final
# file, md5 642541bd, was not run on the GPU), then next_s35.sh's part (1): graph-replay tunes at the four bf16
# forward sweep rows whose tune timed out in s34/call1, one shape per process.
#   run(command="bash benchmarks/prototypes/next_s35a.sh", timeout_s=560)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
timeout 280 python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
for s in 64x256x7x7 1x16x64x64 8x512x32x32 4x128x128x128; do
  [ $((SECONDS - START)) -gt 500 ] && break
  timeout 45 python3 benchmarks/tune.py --graph --loose --shapes $s --dtypes bfloat16 --top 8 >> $OUT/tune_bf16_fwd_graph.txt 2>&1
  echo "tune $s rc=$? at $((SECONDS - START)) s"
done
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
