#!/usr/bin/env bash
# Thirty-fifth session, third call (the last of its device time). After call1 (the s38 patches) and call2
# (both2, chsum2: both worse where call1 lost):
# - rows split (flat_affine_rows_split_s39.patch): the s38 "both" patch, but the rows come in two kernels:
#   kRowsAffine (weight / bias loaded before the row, call1's 0.61-0.70x affine forward at (1024,256,4,4))
#   and kRowsPlain, the committed code exactly (the plain forward lost 1.05-1.22x to either early form);
# - batch sums split (batch_sums_split_s39.patch): s38's batch_sums (tree) from N = 96 on (0.52-0.94x from
#   N = 112, call1), the committed warp per channel below (it beat both new forms at N = 8-64).
# all3 = both. A/B of all3 against the committed file (the parts were timed alone in call1), then the
# full suite with all3 applied in the tree (md5 recorded, reverted on exit).
#   run(command="bash benchmarks/prototypes/next_s39c.sh", timeout_s=600)
set -uo pipefail
P=benchmarks/prototypes
source $P/ab_env.sh all3 $P/flat_affine_batch_sums_all3_s39.patch
SH=1024x256x4x4,128x512x8x8,256x512x8x8,512x256x5x5,64x256x7x7,32x256x7x7,256x256x6x6,2048x256x3x4,512x256x1x7,112x64x32x32,8x512x32x32,4x128x128x128
timeout 150 python3 $P/pdl_ab_s21.py base=instance_norm.py all3=/tmp/vab/all3/instance_norm.py \
  --rounds 2 --cases fwd,fwdaff,train,run --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 $P/ab_verdict.py $OUT/ab.txt --rows 96 --worst 10 | tee $OUT/verdict.txt
git apply $P/flat_affine_batch_sums_all3_s39.patch && trap 'git apply -R benchmarks/prototypes/flat_affine_batch_sums_all3_s39.patch' EXIT
md5sum instance_norm.py tests/*.py > $OUT/md5.txt
timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite (all3) rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
