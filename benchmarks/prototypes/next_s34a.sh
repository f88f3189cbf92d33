#!/usr/bin/env bash
# Thirtieth session, call 1: the twenty-ninth session's prepared call (next_s33h.sh: tune.py --loose --backward
# at fp32 (1,8,S,S); ncu of stream(CS=16,S=4) forward at fp32 (1,96,384|512,...)), plus tune.py --graph --loose
# at the sweep rows where torch.compile led ours in graph replay (s29/call8: forward fp32 (8,512,32,32), bf16
# (64,256,7,7), (1,16,64,64), (8,512,32,32), (4,128,128,128); backward fp32 (64,256,7,7), bf16 (8,512,32,32)).
#   run(command="bash benchmarks/prototypes/next_s34a.sh", timeout_s=560)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
for mode in --graph ""; do
  timeout 40 python3 benchmarks/tune.py $mode --loose --backward --shapes 1x8x384x384,1x8x448x448,1x8x512x512 \
    --dtypes float32 --top 10 > $OUT/tune_bwd_loose$mode.txt 2>&1
done
echo "tune bwd at $((SECONDS - START)) s"
timeout 45 python3 benchmarks/tune.py --graph --loose --shapes 8x512x32x32 --dtypes float32 --top 10 > $OUT/tune_small_fwd_graph.txt 2>&1
timeout 60 python3 benchmarks/tune.py --graph --loose --shapes 64x256x7x7,1x16x64x64,8x512x32x32,4x128x128x128 \
  --dtypes bfloat16 --top 10 >> $OUT/tune_small_fwd_graph.txt 2>&1
timeout 40 python3 benchmarks/tune.py --graph --loose --backward --shapes 64x256x7x7 --dtypes float32 --top 10 > $OUT/tune_small_bwd_graph.txt 2>&1
timeout 40 python3 benchmarks/tune.py --graph --loose --backward --shapes 8x512x32x32 --dtypes bfloat16 --top 10 >> $OUT/tune_small_bwd_graph.txt 2>&1
echo "tune small at $((SECONDS - START)) s"
for s in 384 512; do
  timeout 50 ncu --clock-control none --profile-from-start off -k regex:stream_kernel \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
    python3 benchmarks/prototypes/ncu_fwd_plan_s33.py 1 96 $s $s float32 stream 8 0 16 4 > $OUT/ncu_fwd_1x96x$s.txt 2>&1
  echo "ncu $s rc=$? at $((SECONDS - START)) s"
done
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
