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
bash benchmarks/prototypes/ncu_onchip_counts.sh $(( (END - SECONDS) / 2 )) .scratch/old.py instance_norm.py > /dev/null
tail -3 $OUT/pytest_onchip.txt; cut -c1-140 $OUT/ab.txt; grep -h "inst_executed\|duration\|issue_active\|registers" $OUT/ncu_*.txt
