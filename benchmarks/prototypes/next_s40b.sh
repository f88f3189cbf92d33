#!/usr/bin/env bash
# Thirty-sixth session, call 2: the register rows with accesses of 4 / 2 elements (rows_width_s40.patch: H*W a
# multiple of 4 or 2 loads and stores 8- / 16-byte (fp32: 8 / 16, 16-bit: 4 / 8) accesses, a quarter / half of
# the load and store instructions; width 1 unchanged). A/B against the committed file on even H*W (the widths)
# and odd controls, forward, affine forward and training step, fp32 / bf16, 2 rounds; then the suite on it.
#   run(command="bash benchmarks/prototypes/next_s40b.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh w $P/rows_width_s40.patch
SH=1024x256x4x4,2048x256x3x4,512x256x2x3,1024x256x2x2,128x512x8x8,256x256x6x6,64x256x7x7,512x256x5x5
timeout 200 python3 $P/pdl_ab_s21.py base=instance_norm.py w=/tmp/vab/w/instance_norm.py \
  --rounds 2 --cases fwd,fwdaff,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 48 --worst 10 | tee $OUT/verdict.txt
source $P/suite_with_patch.sh $P/rows_width_s40.patch 595
