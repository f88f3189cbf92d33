#!/usr/bin/env bash
# Thirty-third session, call 4: lean rows (flat_rows_lean_s37.patch: the channel divided once, 32-bit
# indexing through opaque_pointer, unpredicated clamped loads, G's shift; SASS of the fp32 rows kernel
# 588 -> ~410 lines to its last store) against the committed file, within the cut and, as leanuncut
# (+ rows everywhere), past it; ncu of the committed rows (uncut) and lean rows (uncut) at the ncu shapes;
# the flat tests on lean. lean0 (flat_rows_lean0_s37.patch): lean without opaque_pointer (its loads and
# stores stay LDG/STG with 64-bit index math; opaque_pointer makes them generic). Run on a clean tree.
#   run(command="bash benchmarks/prototypes/next_s37e.sh", timeout_s=600)
set -uo pipefail
cat benchmarks/prototypes/flat_rows_lean_s37.patch benchmarks/prototypes/flat_unruled_s37.patch > /tmp/leanuncut.patch
source benchmarks/prototypes/ab_env.sh lean benchmarks/prototypes/flat_rows_lean_s37.patch leanuncut /tmp/leanuncut.patch \
  unruled benchmarks/prototypes/flat_unruled_s37.patch lean0 benchmarks/prototypes/flat_rows_lean0_s37.patch
SH=32x64x8x8,64x128x8x8,8x256x12x12,32x256x7x7,16x128x12x12,64x96x5x5,1024x256x2x2,64x256x7x7,16x256x12x12,64x256x12x12,128x512x8x8,512x256x1x7
timeout 200 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py lean=/tmp/vab/lean/instance_norm.py \
  leanuncut=/tmp/vab/leanuncut/instance_norm.py lean0=/tmp/vab/lean0/instance_norm.py --rounds 2 --cases fwd,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 48 --worst 6 | tee $OUT/verdict.txt
timeout 120 ncu --profile-from-start off --kernel-name regex:flat_kernel --section SpeedOfLight --section LaunchStats \
  --section Occupancy --section WarpStateStats --section InstructionStats \
  python3 benchmarks/prototypes/ncu_rows_s36.py uncut=/tmp/vab/unruled/instance_norm.py leanuncut=/tmp/vab/leanuncut/instance_norm.py \
  lean=/tmp/vab/lean/instance_norm.py > $OUT/ncu_rows.txt 2>&1
echo "ncu rc=$? at $((SECONDS - START)) s"
grep -E "^(uncut|leanuncut|lean) |Duration|Executed Instructions  |Warp Cycles Per Issued|Registers Per" $OUT/ncu_rows.txt | head -80
git apply benchmarks/prototypes/flat_rows_lean_s37.patch && trap 'git apply -R benchmarks/prototypes/flat_rows_lean_s37.patch' EXIT
timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests/test_gpu.py tests/test_epilogue.py -p no:cacheprovider \
  -k "flat or rows_cut or low_precision_module or nan" > $OUT/tests_lean.txt 2>&1
echo "tests (lean) rc=$? at $((SECONDS - START)) s"; tail -2 $OUT/tests_lean.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
