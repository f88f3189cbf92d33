#!/usr/bin/env bash
# Prepared in the twenty-eighth session (no carry): where torch.compile beats us in CUDA-graph replay
# (L2 warm) at few instances, and what our best plan is there. s32/call6-7: fp32 (2,8,384,384) compile
# 8.56 us against our 12.58 (best plan multi_cta 10.3), fp32 (1,8,512,512) 7.57 against 8.28, bf16
# (1,8,512,512) 6.11 against 7.49. This maps a grid of few-instance shapes whose tensor fits the L2
# (4-40 MB): bench.py (graph-replay table: ours, eager, compile, group_norm, copy) and tune.py --graph
# over every plan (top 8), both dtypes, forward; then the backward's tune at four of them.
#   run(command="bash benchmarks/prototypes/next_s33.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/device_base.sh
SH=1x8x512x512,2x8x384x384,4x8x384x384,1x32x256x256,2x16x320x320,8x8x256x256,1x4x1024x1024,1x16x448x448
timeout 150 python3 benchmarks/tune.py --graph --shapes $SH --dtypes float32,bfloat16 --top 8 > $OUT/tune_graph.txt 2>&1
echo "tune at $((SECONDS - START)) s"
timeout 90 python3 benchmarks/tune.py --graph --backward --shapes 1x8x512x512,2x8x384x384,1x32x256x256,1x16x448x448 \
  --dtypes float32,bfloat16 --top 6 > $OUT/tune_graph_bwd.txt 2>&1
echo "tune bwd at $((SECONDS - START)) s"
timeout $((585 - (SECONDS - START))) python3 benchmarks/bench.py --backward --shapes ${SH%,8x8x256x256*} --dtypes float32,bfloat16 \
  --out $OUT/bench > $OUT/bench.txt 2>&1
echo "bench rc=$? at $((SECONDS - START)) s"
grep -A 20 "CUDA-graph replay" $OUT/bench.txt | head -60
rm -f $OUT/bench/bandwidth.png
