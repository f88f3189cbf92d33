#!/usr/bin/env bash
# Nineteenth session, call 2: the few-instance heuristic (crowd_of, kFewestCluster) checked.
# Needs .scratch/old.py (the previous commit's instance_norm.py) carried.
#   1. both builds in parallel; the plan tests;
#   2. tune.py (the new default against every candidate) over the few and under-SMs shapes, forward
#      in do_bench and graph replay, the backward in graph replay (data: the backward's base plan
#      follows the forward's);
#   3. pdl_ab_s21.py old against new: forward, training step, eval forward and eval training step.
set -uo pipefail
END=$((SECONDS + 570))
source benchmarks/prototypes/ab_common.sh  # environment, device.txt, both builds
timeout 120 python3 -m pytest -q -x tests/test_gpu.py -k "chosen_plans or candidate_plans or back_to_back" > $OUT/pytest_plans.txt 2>&1; echo "rc=$?" >> $OUT/pytest_plans.txt
FEW=1x16x64x64,1x32x64x64,2x16x48x48,1x4x256x256,1x3x224x224,1x1x512x512,1x64x64x64,1x128x64x64,2x48x48x48,1x100x80x80,1x12x256x256,1x8x256x256
timeout 110 python3 benchmarks/tune.py --shapes $FEW --dtypes float32,bfloat16 --top 8 --graph > $OUT/tune_graph.txt 2>&1; echo "rc=$?" >> $OUT/tune_graph.txt
timeout 90 python3 benchmarks/tune.py --shapes $FEW --dtypes float32,bfloat16 --top 8 > $OUT/tune_dobench.txt 2>&1; echo "rc=$?" >> $OUT/tune_dobench.txt
timeout 70 python3 benchmarks/tune.py --backward --graph --shapes 1x16x64x64,1x32x64x64,2x16x48x48,1x4x256x256,1x3x224x224,1x1x512x512,1x64x64x64 --dtypes float32,bfloat16 --top 6 > $OUT/tune_bwd_graph.txt 2>&1; echo "rc=$?" >> $OUT/tune_bwd_graph.txt
timeout $(( END - SECONDS )) python3 benchmarks/prototypes/pdl_ab_s21.py old=.scratch/old.py new=instance_norm.py --rounds 3 --cases fwd,train,eval,evaltrain \
  --shapes 1x16x64x64,2x16x48x48,1x4x256x256,1x3x224x224,1x1x512x512,1x64x64x64,1x2x4096x4096 > $OUT/ab.txt 2>&1; echo "rc=$?" >> $OUT/ab.txt
tail -3 $OUT/pytest_plans.txt; cut -c1-150 $OUT/ab.txt
