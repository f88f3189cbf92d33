#!/usr/bin/env bash
# Prepared in the thirty-fifth session (run first in the next). bebbc02 (s39/call3) loses consistently in one
# place: the running statistics (train mode, track_running_stats, no grad) at N = 32 and 64 (7x7), graph
# 1.34-1.40x (+1.7-2.4 us), though N < 96 runs warp_sums, the committed code of be13472d, inside the new kernel
# (__launch_bounds__(1024), batch_sums' 16 KB of static shared memory). sep (batch_sums_sep_s39.patch): warp_sums
# in its own instances (template bool kTiles), kMergeThreads' bounds, no static shared memory. old =
# be13472d's file (revert_to_be13472d_s39.patch). The patch also carries the reviews' mends (BatchSumLaunch.tiles,
# comments) and tests (test_flat_rows_weight_or_bias, test_batch_sums in float64). Cases run (running statistics) and train (affine training
# step: channel_sums) over N 8..2048, fp32 / bf16, 2 rounds; then the suite with sep applied in the tree (md5
# recorded, reverted on exit). If sep is no slower than old at N < 96 and keeps bebbc02's gains from 96 on,
# apply batch_sums_sep_s39.patch and commit the tested file.
#   run(command="bash benchmarks/prototypes/next_s40a.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh old $P/revert_to_be13472d_s39.patch sep $P/batch_sums_sep_s39.patch
SH=8x512x32x32,32x256x7x7,64x256x7x7,64x256x12x12,95x256x7x7,96x256x7x7,128x512x8x8,512x256x5x5,1024x256x4x4,2048x256x3x4
timeout 200 python3 $P/pdl_ab_s21.py base=instance_norm.py old=/tmp/vab/old/instance_norm.py sep=/tmp/vab/sep/instance_norm.py \
  --rounds 2 --cases run,train,fwd --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 60 --worst 10 | tee $OUT/verdict.txt
source $P/suite_with_patch.sh $P/batch_sums_sep_s39.patch
