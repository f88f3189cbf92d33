#!/usr/bin/env bash
# Thirty-first session, call 2 (carry [".whlA"]): stash the first half of the CuTe-DSL peer's wheels
# (benchmarks/quack_wheels.sh), then next_s35.sh's part (2): bench.py's backward table with the peers at
# split_backward's picks and the fp32 (2,8,384,384) forward gap.
#   run(command="bash benchmarks/prototypes/next_s35b.sh", carry=[".whlA"], timeout_s=420)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
bash benchmarks/quack_wheels.sh stash > $OUT/stash.txt 2>&1; echo "stash rc=$?"
timeout $((400 - (SECONDS - START))) python3 benchmarks/bench.py --backward --shapes 1x8x512x512,2x4x464x464,2x8x384x384 \
  --dtypes float32 --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$? at $((SECONDS - START)) s"; grep -A8 "CUDA-graph replay" $OUT/bench.txt | head -30
rm -f $OUT/bench/bandwidth.png
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
