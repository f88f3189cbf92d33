#!/usr/bin/env bash
# Thirty-fifth session, second call. s39/call1 (next_s39a.sh): the s38 patches won overall (all: graph geomean
# 0.890 over 96 rows; the affine forward at (1024, 256, 4, 4) 0.69x fp32 / 0.61x bf16, the training step
# 0.74x / 0.68x) but lost consistently in two places:
# - the plain forward at (1024, 256, 4, 4), bf16 1.11x / fp32 1.05x: the rows' affine_of (channel_value's dtype
#   switch) ahead of the row's loads. both2 (flat_affine_late_both_s39.patch) loads weight and bias right after
#   the row's loads issue;
# - running statistics at N = 8..64, 1.04-1.14x (+0.4-0.6 us): batch_sums' shared-memory tree, a barrier a level.
#   chsum2 (batch_sums_shfl_s39.patch): about four batch rows a slice, a warp's slices by butterfly, the warps'
#   sums added by warp 0 (two barriers).
# all2 = both2 + chsum2. Same 12 shapes and cases, 2 rounds; then the seed of call1's one failure (gelu eval,
# a test tolerance: widened to twice eager's in this tree) and the full suite with all2 applied in the tree.
#   run(command="bash benchmarks/prototypes/next_s39b.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh both2 $P/flat_affine_late_both_s39.patch chsum2 $P/batch_sums_shfl_s39.patch \
  all2 $P/flat_affine_batch_sums_all_s39.patch
SH=1024x256x4x4,128x512x8x8,256x512x8x8,512x256x5x5,64x256x7x7,32x256x7x7,256x256x6x6,2048x256x3x4,512x256x1x7,112x64x32x32,8x512x32x32,4x128x128x128
timeout 220 python3 $P/pdl_ab_s21.py base=instance_norm.py both2=/tmp/vab/both2/instance_norm.py \
  chsum2=/tmp/vab/chsum2/instance_norm.py all2=/tmp/vab/all2/instance_norm.py \
  --rounds 2 --cases fwd,fwdaff,train,run --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 96 --worst 8 | tee $OUT/verdict.txt
git apply $P/flat_affine_batch_sums_all_s39.patch && trap 'git apply -R benchmarks/prototypes/flat_affine_batch_sums_all_s39.patch' EXIT
INSTANCE_NORM_TEST_SEED=6072102744313536536 timeout 60 python3 -m pytest -q tests/test_epilogue.py -p no:cacheprovider \
  -k "test_module_like_eager and cuda-float32-gelu-eval" > $OUT/seed.txt 2>&1; echo "seed rc=$?"; tail -1 $OUT/seed.txt
timeout $((595 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite (all2) rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
md5sum instance_norm.py tests/*.py > $OUT/md5.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
