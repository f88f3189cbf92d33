#!/usr/bin/env bash
# Prepared in the thirty-fourth session (run first in the next). s38/call6 (torch.profiler, eager, (1024,256,4,4)):
# - the register rows' AFFINE forward took 17.81 us against 11.01 without weight and bias in fp32 (bf16 13.75 /
#   8.91), the span path 10.97 / 10.23: the training step's losses of the wider rows rule are this (every rows
#   A/B so far timed the plain forward). The rows loaded weight and bias after their butterflies.
# - channel_sums_kernel (dweight, dbias over the batch) took 14.33 us of the 62.5 us fp32 training step: a warp per
#   channel reading one sector per lane (sums[n * C + c], lanes over n), 32 CTAs for 256 channels.
# Variants, each a patch on this tree:
# - affine (flat_rows_affine_early_s38.patch): every rows lane loads its channel's weight and bias before its
#   row; publish with the rstd at hand; the review's comment mends; tests test_fused_rows_many_ctas and
#   test_flat_rows_named_instances;
# - both (flat_affine_early_both_s38.patch): affine, and the span forward loads them in the coefficients' lane
#   before waiting for its span;
# - chsum (batch_sums_s38.patch): channel sums and running statistics by batch_sums (a CTA per 8 channels, up
#   to 128 strided batch slices, a fixed-order tree in shared memory); test_batch_sums;
# - all (flat_affine_batch_sums_all_s38.patch): both + chsum.
# A/B of fwd, fwdaff (affine forward, no grad), train (affine training step) and run (train-mode forward with
# running statistics), 12 shapes (two of other families: base fwd against fwdaff there says whether their affine
# costs as the rows' did), fp32 and bf16, 2 rounds; then the full suite on all's file (applied in the tree for
# the suite, md5 recorded, reverted on exit). If a part loses, land the others after their own suite.
#   run(command="bash benchmarks/prototypes/next_s39a.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh affine $P/flat_rows_affine_early_s38.patch both $P/flat_affine_early_both_s38.patch \
  chsum $P/batch_sums_s38.patch all $P/flat_affine_batch_sums_all_s38.patch
SH=1024x256x4x4,128x512x8x8,256x512x8x8,512x256x5x5,64x256x7x7,32x256x7x7,256x256x6x6,2048x256x3x4,512x256x1x7,112x64x32x32,8x512x32x32,4x128x128x128
timeout 250 python3 $P/pdl_ab_s21.py base=instance_norm.py affine=/tmp/vab/affine/instance_norm.py \
  both=/tmp/vab/both/instance_norm.py chsum=/tmp/vab/chsum/instance_norm.py all=/tmp/vab/all/instance_norm.py \
  --rounds 2 --cases fwd,fwdaff,train,run --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 96 --worst 8 | tee $OUT/verdict.txt
git apply $P/flat_affine_batch_sums_all_s38.patch && trap 'git apply -R benchmarks/prototypes/flat_affine_batch_sums_all_s38.patch' EXIT
timeout $((595 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite (all) rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
md5sum instance_norm.py tests/*.py > $OUT/md5.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
