#!/usr/bin/env bash
# Prepared in the twenty-sixth session for the next one's first device call (no carry):
#   run(command="bash benchmarks/prototypes/next_s31.sh", timeout_s=600)
# rc (host_reciprocal_s29.patch: instance size and reciprocal in Params from the host) on the file with
# eif landed. Its twenty-fifth-session loss at the main float32 backward (6239 -> 6339 us graph) is gone
# there: s30/call6, 5 rounds, 5812 -> 5811 graph; 11 small rows geomean 0.985, 16-bit 0.973, rcl (the
# layout alone) 1.001. This call: same bits (bitwise_ab.py), then the twenty-fifth session's 45 small rows
# and the main shape's rows, 3 rounds, and the verdict. When rc wins: next_s31b.sh (the suite on the
# session's winners and the mutants whose code they touch; rc with mutate_rc_s31.patch).
set -uo pipefail
START=$SECONDS
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 INSTANCE_NORM_REQUIRE_GPU=1 TORCH_EXTENSIONS_DIR=/tmp/ext MAX_JOBS=8
bash benchmarks/prototypes/patch_ab_build.sh rc benchmarks/prototypes/host_reciprocal_s29.patch || exit 1
echo "built at $((SECONDS - START)) s"
timeout 150 python3 benchmarks/prototypes/bitwise_ab.py instance_norm.py /tmp/vab/rc/instance_norm.py > $OUT/bitwise.txt 2>&1
tail -1 $OUT/bitwise.txt; echo "bitwise at $((SECONDS - START)) s"
AB="base=instance_norm.py rc=/tmp/vab/rc/instance_norm.py --rounds 3"
timeout 150 python3 benchmarks/prototypes/pdl_ab_s21.py $AB --cases fwd,bwd,bwdaff,train --dtypes float32,bfloat16 \
  --shapes 112x64x512x512 > $OUT/ab.txt 2>&1
timeout $((585 - (SECONDS - START))) python3 benchmarks/prototypes/pdl_ab_s21.py $AB --cases fwd,bwd,bwdaff \
  --dtypes float32,bfloat16,float16 --shapes 8x512x32x32,64x256x7x7,1x16x64x64,32x256x32x32,4x128x128x128 >> $OUT/ab.txt 2>&1
grep -v "^loaded" $OUT/ab.txt | cut -c1-130; echo "A/B done at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --worst 3 | tee $OUT/verdict.txt
echo "done at $((SECONDS - START)) s"
