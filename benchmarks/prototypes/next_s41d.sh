#!/usr/bin/env bash
# Thirty-seventh session. rows_bwd_s40.patch won the backward op alone everywhere (s41/call1: geomean 0.871 over
# 88 rows) but lost the gelu module's training step at bf16 (2048,256,3,4) 1.075x and (1024,256,7,7) 1.033x.
# rows_bwd_s41.patch: the same with the backward's rows only where there is no activation (run's rows flag,
# flat_rows_kernel's condition). A/B on those shapes and controls, 2 rounds, then the suite with the patch.
#   run(command="bash benchmarks/prototypes/next_s41d.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh brows $P/rows_bwd_s41.patch
SH=2048x256x3x4,1024x256x7x7,64x256x7x7,1024x256x4x4,4096x256x2x2,64x256x12x12
timeout 150 python3 $P/pdl_ab_s21.py base=instance_norm.py brows=/tmp/vab/brows/instance_norm.py \
  --rounds 2 --cases bwd,train,acttrain --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 36 --worst 10 | tee $OUT/verdict.txt
source $P/suite_with_patch.sh $P/rows_bwd_s41.patch 595
