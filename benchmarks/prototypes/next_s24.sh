#!/usr/bin/env bash
# Prepared in the nineteenth session for the next one's first device call: the onchip kernel's
# instruction diet (benchmarks/prototypes/onchip_fast_s24.patch and .md; benchmarks/NOTES.md, nineteenth
# session, calls 7-8). Before the call:
#   git show HEAD:instance_norm.py > .scratch/old.py      # the base, carried (.scratch is git-ignored)
#   git apply benchmarks/prototypes/onchip_fast_s24.patch  # or your own version of it
# then: run(command="bash benchmarks/prototypes/next_s24.sh", carry=[".scratch"])
# 1. both builds in parallel; 2. the GPU tests nearest the onchip kernel; 3. A/B old/new at small shapes
# (do_bench and graph replay, forward and training step); 4. ncu instruction counts of the onchip forward
# at fp32 (8,512,32,32), old and new. The full suite goes in the second call.
set -uo pipefail
END=$((SECONDS + 565))
source benchmarks/prototypes/ab_common.sh  # environment, device.txt, both builds
timeout 150 python3 -m pytest -q -x tests/test_gpu.py tests/test_epilogue.py -k "onchip or chosen_plans or candidate or bitwise or back_to_back" -p no:cacheprovider > $OUT/pytest_onchip.txt 2>&1; echo "rc=$?" >> $OUT/pytest_onchip.txt
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py old=.scratch/old.py new=instance_norm.py --rounds 3 --cases fwd,train \
  --dtypes float32,bfloat16 --shapes 8x512x32x32,4x128x128x128,1x16x64x64,32x3x224x224,3x5x127x129,2x16x48x48 > $OUT/ab.txt 2>&1; echo "rc=$?" >> $OUT/ab.txt
for f in .scratch/old.py instance_norm.py; do
  n=$(basename $f .py)
  timeout $(( (END - SECONDS) / 2 )) ncu --clock-control none --nvtx --nvtx-include "measure/" --metrics smsp__inst_executed.sum,gpu__time_duration.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread \
    python3 -c "
import sys, importlib.util, torch
s = importlib.util.spec_from_file_location('mm', '$f'); m = importlib.util.module_from_spec(s); s.loader.exec_module(m); m.load_extension()
x = torch.randn(8, 512, 32, 32, device='cuda'); mod = m.ModelNew(512).cuda()
with torch.no_grad():
    for _ in range(5): mod(x)
    torch.cuda.synchronize(); torch.cuda.nvtx.range_push('measure'); mod(x); torch.cuda.nvtx.range_pop(); torch.cuda.synchronize()
" > $OUT/ncu_$n.txt 2>&1
done
tail -3 $OUT/pytest_onchip.txt; cut -c1-140 $OUT/ab.txt; grep -h "inst_executed\|duration\|issue_active\|registers" $OUT/ncu_*.txt
