#!/usr/bin/env bash
# Prepared in the thirty-fourth session (run first in the next): the register rows' affine forward. s38/call6
# (torch.profiler, eager, fp32 (1024,256,4,4)): the rows forward took 17.81 us with weight and bias against 11.01
# without (bf16 13.75 / 8.91), while the span path took 10.97 / 10.23: the training step's 0.90x with the span
# forward (the thirty-third session's unexplained training-step losses) is this. The rows loaded weight and bias
# after the butterflies (behind an L1 prefetch by one lane), a load in every warp's one dependent chain.
# affine (flat_rows_affine_early_s38.patch): every lane loads its channel's weight and bias before its row
# (Forward::affine_of / coef_of_affine), and publishes the rstd at hand (publish_statistics: no second rstd_of).
# A/B of fwd, fwdaff (the affine forward, no grad) and train, 14 shapes, fp32 and bf16, 2 rounds; then the full
# suite on the patched file (applied in the tree for the suite, md5 recorded, reverted on exit).
#   run(command="bash benchmarks/prototypes/next_s39a.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh affine benchmarks/prototypes/flat_rows_affine_early_s38.patch
SH=1024x256x4x4,128x512x8x8,256x512x8x8,128x256x10x10,512x256x5x5,64x256x7x7,16x256x12x12,32x256x7x7,256x256x6x6,2048x256x3x4,1024x256x2x2,512x256x1x7
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py affine=/tmp/vab/affine/instance_norm.py \
  --rounds 2 --cases fwd,fwdaff,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 72 --worst 8 | tee $OUT/verdict.txt
git apply benchmarks/prototypes/flat_rows_affine_early_s38.patch &&
  trap 'git apply -R benchmarks/prototypes/flat_rows_affine_early_s38.patch' EXIT
timeout $((595 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite (affine) rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
md5sum instance_norm.py tests/*.py > $OUT/md5.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
