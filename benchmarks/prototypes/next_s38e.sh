#!/usr/bin/env bash
# Thirty-fourth session, call 4: the span path's 32-bit offsets in the forward only (flat_span_fwd_s38.patch,
# applied in the tree) against c6c1ad1 (the 128-thread rows, revert_to_c6c1ad1_s38.patch) and against
# 12bed20 (the session's start, revert_to_12bed20_final_s38.patch), then the full suite on this exact file.
#   run(command="bash benchmarks/prototypes/next_s38e.sh", timeout_s=600)
set -uo pipefail
source benchmarks/prototypes/ab_env.sh c6c1ad1 benchmarks/prototypes/revert_to_c6c1ad1_s38.patch \
  old benchmarks/prototypes/revert_to_12bed20_final_s38.patch
SH=1024x256x4x4,32x256x7x7,64x256x7x7,512x256x5x5,64x256x12x12,256x256x6x6,512x256x1x7,256x512x2x3,2048x256x3x4,16x256x12x12
timeout 150 python3 benchmarks/prototypes/pdl_ab_s21.py base=instance_norm.py c6c1ad1=/tmp/vab/c6c1ad1/instance_norm.py \
  old=/tmp/vab/old/instance_norm.py --rounds 2 --cases fwd,train --shapes $SH --dtypes float32,bfloat16 > $OUT/ab.txt 2>&1
echo "A/B rc=$? at $((SECONDS - START)) s"
python3 benchmarks/prototypes/ab_verdict.py $OUT/ab.txt --rows 40 --worst 8 | tee $OUT/verdict.txt
timeout $((595 - (SECONDS - START))) python3 -m pytest -q tests -p no:cacheprovider > $OUT/suite.txt 2>&1
echo "suite rc=$? at $((SECONDS - START)) s"; tail -3 $OUT/suite.txt
md5sum instance_norm.py tests/*.py > $OUT/md5.txt
(cd $OUT && tar czf logs.tgz build*.txt device.txt && rm -f build*.txt device.txt)
