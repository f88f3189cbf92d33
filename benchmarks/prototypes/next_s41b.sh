#!/usr/bin/env bash
# Prepared in the thirty-sixth session (run first in the next). s40/call6 timed rows on any grid where the rows'
# accesses are 2 or 4 elements wide (any2): forward graph replay 0.62-0.95x at H*W 6, 10, 18, 20, 36, but bf16
# (64,256,12,12) (G = 32) 1.06x and small training-step losses (fp32 (256,256,6,6) 1.03x, (64,256,12,12) 1.02x).
# any2g16 (rows_any2g16_s40.patch): the same up to G = 16. A/B against the committed file on those shapes and
# controls, 3 rounds (the training-step rows were within 3 %), then the suite on it in the tree.
# If it wins without a consistent loss: git apply benchmarks/prototypes/rows_any2g16_s40.patch, check md5
# against $OUT/md5.txt, update test_flat_rows_cut's docstring and flat_shape's comment (the rule), commit.
#   run(command="bash benchmarks/prototypes/next_s41b.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh g16 $P/rows_any2g16_s40.patch
SH=512x256x2x3,256x512x2x5,512x256x3x6,512x256x4x5,256x256x6x6,64x256x12x12,1024x256x4x4,64x256x7x7
timeout 200 python3 $P/pdl_ab_s21.py base=instance_norm.py g16=/tmp/vab/g16/instance_norm.py \
  --rounds 3 --cases fwd,fwdaff,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 48 --worst 10 | tee $OUT/verdict.txt
source $P/suite_with_patch.sh $P/rows_any2g16_s40.patch 595
