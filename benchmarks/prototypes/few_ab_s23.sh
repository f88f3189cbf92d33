#!/usr/bin/env bash
# Nineteenth session, call 4: ef3472f (.scratch/old.py, carried) against the final heuristic, module
# calls in do_bench and graph replay, forward and training step, few-instance shapes.
set -uo pipefail
source benchmarks/prototypes/ab_common.sh  # environment, device.txt, both builds
timeout 330 python3 benchmarks/prototypes/pdl_ab_s21.py old=.scratch/old.py new=instance_norm.py --rounds 3 --cases fwd,train \
  --dtypes float32,bfloat16,float16 \
  --shapes 1x16x64x64,1x32x64x64,2x16x48x48,1x128x64x64,1x4x256x256,1x3x224x224,1x8x256x256,1x12x256x256,1x1x512x512 > $OUT/ab.txt 2>&1; echo "rc=$?" >> $OUT/ab.txt
cut -c1-130 $OUT/ab.txt
