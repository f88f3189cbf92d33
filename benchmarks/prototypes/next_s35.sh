#!/usr/bin/env bash
# Prepared in the thirtieth session for the next one's first call (no device time was left): NOTES Next 1 and 3
# of the thirtieth session. (1) tune.py --graph --loose at the bf16 sweep rows whose forward tune timed out in
# s34/call1 (one shape per process, so a slow one cannot starve the rest); (2) bench.py's forward and backward
# tables with the peers at split_backward's picks and the fp32 (2,8,384,384) forward gap.
#   run(command="bash benchmarks/prototypes/next_s35.sh", timeout_s=560)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
for s in 64x256x7x7 1x16x64x64 8x512x32x32 4x128x128x128; do
  timeout 40 python3 benchmarks/tune.py --graph --loose --shapes $s --dtypes bfloat16 --top 8 >> $OUT/tune_bf16_fwd_graph.txt 2>&1
  echo "tune $s rc=$? at $((SECONDS - START)) s"
done
timeout $((550 - (SECONDS - START))) python3 benchmarks/bench.py --backward --shapes 1x8x512x512,2x4x464x464,2x8x384x384 \
  --dtypes float32 --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$? at $((SECONDS - START)) s"; grep -A12 "CUDA-graph replay" $OUT/bench.txt | head -40
rm -f $OUT/bench/bandwidth.png
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
