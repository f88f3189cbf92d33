#!/usr/bin/env bash
# Prepared in the thirty-first session (no device time left): the flat forward's reduction in four
# independent sums and without the wrap test where nothing rotates (flat_chains_s35.patch; a helper's reading
# of our flat kernel against quack's at fp32 (64,256,7,7): one warp of each CTA ran two serial 49-add chains
# while the other seven waited, about 1 us of the 4.5). If graph replay at 7x7 drops by about 0.5 us, the
# serial-path reading holds and the register-row rewrite (NOTES, thirty-first session, proposal A) is next.
# A/B against the committed file (3 rounds, forward and training step), the flat tests, then the suite.
#   run(command="bash benchmarks/prototypes/next_s36b.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=16
bash benchmarks/prototypes/patch_ab_build.sh chains benchmarks/prototypes/flat_chains_s35.patch || exit 1
echo "built at $((SECONDS - START)) s"
SH=64x256x7x7,32x64x8x8,16x128x12x12,8x64x13x11,64x96x5x5
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py chains=/tmp/vab/chains/instance_norm.py \
  --rounds 3 --cases fwd,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 20 --worst 5 | tee $OUT/verdict.txt
git apply benchmarks/prototypes/flat_chains_s35.patch
timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider -x > $OUT/suite.txt 2>&1
echo "suite (chains) rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/suite.txt
git apply -R benchmarks/prototypes/flat_chains_s35.patch
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
