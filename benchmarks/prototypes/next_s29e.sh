#!/usr/bin/env bash
# Twenty-fifth session: ska, ske restricted to the running-ahead stream backward (V=4: kIn*V <= 8).
# ske (stream_known_early_s29.patch, every stream backward) gained 0.95-0.98 at (16,64,256,256) and
# (4,128,128,128), which run ahead, but lost 1.07-1.09 at the main float32 shape (K=8, not ahead).
# stream_known_ahead_s29.patch: sass_cmp_s25.py (locally) 255 of 261 kernels identical, the 6 others the
# V=4 stream backward kernels. A/B on the ahead rows; when ab_verdict.py says WINNER, the GPU suite on ska.
#   run(command="bash benchmarks/prototypes/next_s29e.sh", timeout_s=600)
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
bash benchmarks/prototypes/patch_ab_build.sh ska benchmarks/prototypes/stream_known_ahead_s29.patch || exit 1
echo "built at $((SECONDS - START)) s"
timeout $((330 - (SECONDS - START))) python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py ska=/tmp/vab/ska/instance_norm.py \
  --rounds 5 --cases bwd,bwdaff --dtypes float32,bfloat16,float16 --shapes 16x64x256x256,4x128x128x128,112x64x512x512 > $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-150; echo "A/B done at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --worst 3 | tee $OUT/verdict.txt
if grep -q WINNER $OUT/verdict.txt; then
  cp /tmp/vab/ska/instance_norm.py instance_norm.py && md5sum instance_norm.py
  timeout $((590 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider -x > $OUT/suite.txt 2>&1
  tail -5 $OUT/suite.txt
fi
echo "done at $((SECONDS - START)) s"
