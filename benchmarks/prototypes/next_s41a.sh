#!/usr/bin/env bash
# Prepared in the thirty-sixth session (run first in the next). The rows' wide accesses (b745e45) took the
# forward at fp32 (1024,256,4,4) from 11.25 to 7.05 us graph replay, but the rows' rule (flat_shape: rows on few
# lanes, on any grid up to 4 elements or where H*W fills 3/4 of the G * 8 slots) was fitted to element accesses,
# so even H*W on large grids that fill less still take the span path (512x256x2x3, 256x256x6x6 unchanged in
# s40/call5). any2 / any4 (rows_any2_s40.patch / rows_any4_s40.patch): rows on any grid where rows_width >= 2 /
# == 4. A/B over shapes whose path they change (M 6, 10, 18, 20, 36, 144) and two controls, fp32 / bf16, forward,
# affine forward, training step, 2 rounds. Then, if one wins without a consistent loss:
#   source benchmarks/prototypes/suite_with_patch.sh benchmarks/prototypes/rows_anyN_s40.patch   (in a second call,
#   with ab_env's environment), and land it with test_flat_rows_cut's docstring saying the new rule.
#   run(command="bash benchmarks/prototypes/next_s41a.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh any2 $P/rows_any2_s40.patch any4 $P/rows_any4_s40.patch
SH=512x256x2x3,256x512x2x5,512x256x3x6,512x256x4x5,256x256x6x6,64x256x12x12,1024x256x4x4,64x256x7x7
timeout 300 python3 $P/pdl_ab_s21.py base=instance_norm.py any2=/tmp/vab/any2/instance_norm.py any4=/tmp/vab/any4/instance_norm.py \
  --rounds 2 --cases fwd,fwdaff,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 48 --worst 10 | tee $OUT/verdict.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
