#!/usr/bin/env bash
# Forty-second session, call 2. s42/call1: the backward's flat cut at 144 won from 8x10 to 11x11 (graph 0.41-0.94x)
# and lost at 12x12 in float32 (bwd 1.21x, 1.18x). flat_bwd128_s42.patch cuts at 128; this A/B times the sizes it
# adds past 121 (8x16, 16x8, 4x32, 2x61 = 122) against the base (64), then the suite on the patch.
#   run(command="bash benchmarks/prototypes/next_s42c.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh fbs $P/flat_bwd128_s42.patch
SH=64x256x8x16,256x256x16x8,32x256x4x32,128x256x2x61
timeout 120 python3 $P/pdl_ab_s21.py base=instance_norm.py fbs=/tmp/vab/fbs/instance_norm.py \
  --rounds 2 --cases bwd,bwdaff,train,acttrain --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 32 --worst 8 | tee $OUT/verdict.txt
source $P/suite_with_patch.sh $P/flat_bwd128_s42.patch 595
