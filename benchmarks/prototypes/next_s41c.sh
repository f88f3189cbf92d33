#!/usr/bin/env bash
# Prepared in the thirty-sixth session. The backward's register rows (rows_bwd_s40.patch): the flat backward with
# instance statistics takes the forward rows' layout (x and dy in registers, 1/2/4 elements an access, two sums
# by butterfly, no shared memory, no barrier) wherever flat_shape's rows rule takes the forward's rows. Never run
# on a GPU (ptxas: 31-48 registers, no spills; builds locally). A/B against the committed file: the backward op
# alone (bwd, bwdaff), the training step and the gelu module's training step (acttrain) at tiny instances, fp32 / bf16, 2 rounds; then the suite on it.
#   run(command="bash benchmarks/prototypes/next_s41c.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh brows $P/rows_bwd_s40.patch
SH=64x256x7x7,32x256x7x7,1024x256x7x7,1024x256x4x4,2048x256x3x4,4096x256x2x2,256x256x2x3,128x512x8x8,512x256x5x5,8x512x8x8,64x256x12x12
timeout 220 python3 $P/pdl_ab_s21.py base=instance_norm.py brows=/tmp/vab/brows/instance_norm.py \
  --rounds 2 --cases bwd,bwdaff,train,acttrain --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 88 --worst 10 | tee $OUT/verdict.txt
source $P/suite_with_patch.sh $P/rows_bwd_s40.patch 595
