#!/usr/bin/env bash
# Twenty-fifth session: rc, the instance size and its reciprocal in Params from the host
# (host_reciprocal_s29.patch, against the file with ska applied): the coefficients no longer convert
# instance_size (I2F.S64) and divide (MUFU.RCP, range check, slow-path call) after the reduction.
# Same bits by construction (IEEE float division on the host); bitwise_ab.py checks it. Locally: 256 of
# 261 kernels' SASS differ (Params' layout), the small backward kernels 41-125 instructions fewer.
# A/B on small shapes; then the GPU suite on rc when ab_verdict.py says WINNER, else on the base (ska).
#   run(command="bash benchmarks/prototypes/next_s29f.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
bash benchmarks/prototypes/patch_ab_build.sh rc benchmarks/prototypes/host_reciprocal_s29.patch || exit 1
echo "built at $((SECONDS - START)) s"
python3 benchmarks/prototypes/bitwise_ab.py instance_norm.py /tmp/vab/rc/instance_norm.py > $OUT/bitwise.txt 2>&1; tail -1 $OUT/bitwise.txt
echo "bitwise at $((SECONDS - START)) s"
timeout $((340 - (SECONDS - START))) python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py rc=/tmp/vab/rc/instance_norm.py \
  --rounds 3 --cases fwd,bwd,bwdaff --dtypes float32,bfloat16,float16 --shapes 8x512x32x32,64x256x7x7,1x16x64x64,32x256x32x32,4x128x128x128 > $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-120; echo "A/B done at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --worst 3 | tee $OUT/verdict.txt
if grep -q WINNER $OUT/verdict.txt && grep -q "all same" $OUT/bitwise.txt; then
  cp /tmp/vab/rc/instance_norm.py instance_norm.py
fi
md5sum instance_norm.py | tee $OUT/suite_md5.txt
timeout $((595 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider -x > $OUT/suite.txt 2>&1
tail -4 $OUT/suite.txt
echo "done at $((SECONDS - START)) s"
