#!/usr/bin/env bash
# Prepared in the thirty-seventh session. The backward's register rows landed (96c91f9) and rows on any grid
# up to G = 16 where accesses are 2 or 4 elements wide (the any2g16 rule). Two things left:
# 1. kFlatBackwardSize 64 -> 144 (flat_bwd144_s41.patch): with rows the flat backward may now beat the warp per
#    instance at 8x10 to 12x12 (the thirteenth session's cut was against the span path). A/B, 2 rounds,
#    cases bwd, bwdaff, train and acttrain (gelu's backward keeps the span path: it must not lose).
# 2. rows_mends_s41.patch: comments and tests only for the two landed changes (kFlatRowsWideAccessGroup named,
#    flat_shape's rule comment with s41/call3's figures, the review's stale comments; test_flat_rows_cut's H*W 18
#    and 72 and the backward at its cuts, test_flat_rows_widths' H*W 17, 18, 34, 65, 66, 129, 130 and the backward
#    without weight and bias and with gelu), and the rows' loads and stores shared by the forward and the backward
#    (load_row / store_row: all 316 kernels' SASS identical to the mends without them, sass_cmp_s25.py locally);
#    needs its GPU suite to land. The 144 cut's combined patch also moves
#    test_chosen_plans' (12,12) backward to flat and the docstring's and README's "the backward up to 64".
# The suite runs on the mends with the 144 cut (rows_mends_fbs144_s41.patch) where the A/B says WINNER, else on
# the mends alone. Land what the suite ran on: git apply that patch, check md5 against $OUT/md5.txt, commit.
#   run(command="bash benchmarks/prototypes/next_s42a.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh fbs $P/flat_bwd144_s41.patch
SH=64x128x12x12,16x256x12x12,32x256x12x12,256x256x10x10,64x256x9x9,512x256x11x11,128x256x8x10
timeout 200 python3 $P/pdl_ab_s21.py base=instance_norm.py fbs=/tmp/vab/fbs/instance_norm.py \
  --rounds 2 --cases bwd,bwdaff,train,acttrain --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 56 --worst 10 | tee $OUT/verdict.txt
# An activation's backward has no rows and takes the 144 cut too (choose() does not know the activation): its
# rows alone, for the record (land only if they hold as well).
grep -E "^acttrain " $OUT/ab.txt > $OUT/ab_act.txt; python3 $P/ab_verdict.py $OUT/ab_act.txt --rows 14 --worst 5 | tee $OUT/verdict_act.txt
if grep -q WINNER $OUT/verdict.txt && ! grep -q "losses [1-9]" $OUT/verdict_act.txt; then SUITE=$P/rows_mends_fbs144_s41.patch; else SUITE=$P/rows_mends_s41.patch; fi
source $P/suite_with_patch.sh $SUITE 595
