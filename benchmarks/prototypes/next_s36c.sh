#!/usr/bin/env bash
# Prepared in the thirty-first session (no device time left): proposal A of NOTES (thirty-first session), the
# flat forward's register rows (flat_rows_s35.patch: G lanes an instance with kFlatRowValues = 8 values each in
# registers, butterfly sums, every lane its coefficients and its own 4- or 2-byte stores; the forward's
# default G becomes the smallest with G * 8 >= M up to 256 elements). A/B against the committed file and
# the chains variant (flat_chains_s35.patch, proposal B) at tiny shapes, forward and training step, 2 rounds;
# then the flat tests and the fused tests on the rows build (its suite next, if the A/B favours it).
#   run(command="bash benchmarks/prototypes/next_s36c.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh rows benchmarks/prototypes/flat_rows_s35.patch \
  chains benchmarks/prototypes/flat_chains_s35.patch
# The last two: large batches, where rows' G leaves fewer instances a CTA (a review's R1: 28 -> 8 at 12x12).
SH=64x256x7x7,32x64x8x8,16x128x12x12,8x64x13x11,64x96x5x5,64x256x12x12,128x512x8x8
timeout 260 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py rows=/tmp/vab/rows/instance_norm.py \
  chains=/tmp/vab/chains/instance_norm.py --rounds 2 --cases fwd,train --shapes $SH --dtypes float32,bfloat16 \
  > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 30 --worst 6 | tee $OUT/verdict.txt
git apply benchmarks/prototypes/flat_rows_s35.patch && trap 'git apply -R benchmarks/prototypes/flat_rows_s35.patch' EXIT
timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests/test_gpu.py tests/test_epilogue.py -p no:cacheprovider \
  -k "flat or epilogue or fused" > $OUT/tests_rows.txt 2>&1
echo "tests (rows) rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/tests_rows.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
